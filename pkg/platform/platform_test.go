package platform

import (
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	if got := Names(); !slices.Equal(got, []string{"amd64", "arm64"}) {
		t.Errorf("Names() = %v", got)
	}
	for _, tc := range []struct {
		uname, name string
		machine     elf.Machine
	}{{"x86_64", "amd64", elf.EM_X86_64}, {"aarch64", "arm64", elf.EM_AARCH64}} {
		a, ok := FromUname(tc.uname)
		if !ok || a.Name != tc.name || a.ELF != tc.machine {
			t.Errorf("FromUname(%q) = %+v %v", tc.uname, a, ok)
		}
		if !Supported(tc.name) {
			t.Errorf("%s not supported", tc.name)
		}
	}
	for _, bad := range []string{"", "x86_64", "armv7l", "riscv64"} {
		if Supported(bad) {
			t.Errorf("%q supported", bad)
		}
	}
	if _, ok := FromUname("armv7l"); ok {
		t.Error("armv7l known")
	}
}

// The test binary itself is an ELF file for the machine it runs on.
func TestMachineOfRunningBinary(t *testing.T) {
	if runtime.GOOS != "linux" || !Supported(runtime.GOARCH) {
		t.Skip("not a linux/amd64 or linux/arm64 test binary")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckELF(exe, runtime.GOARCH); err != nil {
		t.Fatal(err)
	}
}

// Real binaries of both architectures, cross-compiled here by the go
// command that runs the test: each passes for its own architecture and is
// refused, naming both, for the other.
func TestCheckELFRealBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two binaries")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hardway.invalid/elftest\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{}
	for _, a := range Names() {
		out := filepath.Join(dir, "hello-"+a)
		cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags=-s -w", "-o", out, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+a, "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build GOARCH=%s: %v\n%s", a, err, b)
		}
		bins[a] = out
	}
	for a, p := range bins {
		if err := CheckELF(p, a); err != nil {
			t.Errorf("%s binary refused for %s: %v", a, a, err)
		}
		for _, other := range Names() {
			if other == a {
				continue
			}
			err := CheckELF(p, other)
			var me *MismatchError
			if !errors.As(err, &me) || me.Want != other {
				t.Fatalf("%s binary checked for %s: %v", a, other, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "built for "+a) || !strings.Contains(msg, "not "+other) {
				t.Errorf("message %q", msg)
			}
		}
	}
}

func TestFakeELFAndNotELF(t *testing.T) {
	dir := t.TempDir()
	for _, a := range Names() {
		p := filepath.Join(dir, a)
		if err := os.WriteFile(p, FakeELF(a), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := CheckELF(p, a); err != nil {
			t.Errorf("FakeELF(%s): %v", a, err)
		}
		if f, err := elf.Open(p); err != nil || f.Machine.String() == "" {
			t.Errorf("debug/elf reads FakeELF(%s) as %v", a, err)
		} else {
			f.Close()
		}
	}
	// A big-endian header is read as such.
	be := FakeELF("arm64")
	be[elf.EI_DATA] = byte(elf.ELFDATA2MSB)
	be[18], be[19] = 0, byte(elf.EM_AARCH64)
	if m, err := machine(strings.NewReader(string(be))); err != nil || m != elf.EM_AARCH64 {
		t.Errorf("big-endian header: %v %v", m, err)
	}
	for name, data := range map[string]string{"script": "#!/bin/sh\necho hi\n", "short": "\x7fELF", "empty": ""} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := CheckELF(p, "amd64"); !errors.Is(err, ErrNotELF) {
			t.Errorf("%s: %v, want ErrNotELF", name, err)
		}
	}
	if err := CheckELF(filepath.Join(dir, "missing"), "amd64"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := CheckELF(filepath.Join(dir, "amd64"), "riscv64"); err == nil {
		t.Error("an unknown architecture passed")
	}
}
