package lab_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/hardway/hardway/pkg/lab"
)

// BenchmarkUpDown measures a warm `lab up` of three hosts (base cached) until
// every systemd says running, the idle memory per host, and `lab down`:
// the figures in docs/benchmarks.md.
//
//	go test -run '^$' -bench UpDown -benchtime 3x ./tests/lab/
func BenchmarkUpDown(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	var up, down time.Duration
	var mem float64
	for b.Loop() {
		l, err := lab.New(lab.Config{Dir: b.TempDir(), Prefix: "hwt7", Net: "10.240.15", Hosts: 3})
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		if _, err := l.Up(context.Background()); err != nil {
			_ = l.Down(context.Background())
			b.Fatal(err)
		}
		up += time.Since(t0)
		st, err := l.Status(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for _, h := range st.Hosts {
			mem += float64(h.Memory) / (1 << 20) / float64(len(st.Hosts))
		}
		t0 = time.Now()
		if err := l.Down(context.Background()); err != nil {
			b.Fatal(err)
		}
		down += time.Since(t0)
	}
	n := float64(b.N)
	b.ReportMetric(up.Seconds()/n, "s-up")
	b.ReportMetric(down.Seconds()/n, "s-down")
	b.ReportMetric(mem/n, "MiB/host")
}
