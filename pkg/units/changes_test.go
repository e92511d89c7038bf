package units

import (
	"strings"
	"testing"
)

// The changes between two versions are what the flag and setting tables'
// version gates say, once per change with every host it applies to.
func TestChanges(t *testing.T) {
	from := newInventory(t, "v1.33.7", "v3.5.26")
	to := newInventory(t, "v1.34.5", "v3.6.16")
	got, err := Changes(from, to, subnets(t, from))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, c := range got {
		lines = append(lines, c.Component+" "+c.Text()+" "+strings.Join(c.Hosts, ","))
		if c.Reason == "" && c.Kind != "file" {
			t.Errorf("%s %s: no reason", c.Component, c.Name)
		}
	}
	all := "controller-1,controller-2,controller-3"
	want := []string{
		"etcd - --experimental-initial-corrupt-check=true " + all,
		"etcd - --experimental-watch-progress-notify-interval=5s " + all,
		"etcd - --snapshot-count=10000 " + all,
		"etcd + --feature-gates=InitialCorruptCheck=true " + all,
		"etcd + --peer-cert-allowed-cn=controller-1,controller-2,controller-3 " + all,
		"etcd + --watch-progress-notify-interval=5s " + all,
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}

	// A kubelet config setting gated on the Kubernetes version (a lab
	// worker's: the only one with a gated setting).
	from, to = workerInventory(t, "v1.30.14", "", true), workerInventory(t, "v1.31.9", "", true)
	got, err = Changes(from, to, subnets(t, from))
	if err != nil {
		t.Fatal(err)
	}
	var kubelet []string
	for _, c := range got {
		if c.Component == Kubelet {
			kubelet = append(kubelet, c.Text()+" "+strings.Join(c.Hosts, ","))
		}
	}
	if w := "+ " + KubeletConfig + ": failCgroupV1=false worker-1,worker-2"; strings.Join(kubelet, "\n") != w {
		t.Errorf("kubelet changes %q, want %q", kubelet, w)
	}

	// The same versions: nothing.
	if got, err := Changes(from, from, subnets(t, from)); err != nil || len(got) != 0 {
		t.Errorf("Changes(same) = %+v, %v", got, err)
	}
}
