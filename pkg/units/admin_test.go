package units

import (
	"slices"
	"testing"
)

// The admin kubeconfig (system:masters) is on the control-plane hosts only
// when pki.adminKubeconfigOnHosts asks for it; then it restarts nothing.
func TestAdminKubeconfigOnlyWhenAsked(t *testing.T) {
	inv := newInventory(t, "1.36", "")
	ms, err := render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, f := range m.Files {
			if f.Path == AdminKubeconfig || (f.Source != nil && f.Source.Kind == SourceKubeconfig && f.Source.Name == "admin") {
				t.Errorf("%s: %s pushed by default", m.Host, f.Path)
			}
		}
	}
	inv.PKI.AdminKubeconfigOnHosts = true
	ms, err = render(t, inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		f, ok := m.File(AdminKubeconfig)
		cp := slices.Contains(m.Components, APIServer)
		if ok != cp {
			t.Errorf("%s: admin kubeconfig present %v", m.Host, ok)
		}
		if ok && (f.Mode.Perm() != 0o600 || len(f.Components) != 0) {
			t.Errorf("%s: mode %o restarts %v", m.Host, f.Mode.Perm(), f.Components)
		}
	}
}
