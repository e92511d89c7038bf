// Package platform is the one table of the CPU architectures hardway
// installs for: the name the inventory, the release URLs and image configs
// use (Go's GOARCH), what `uname -m` prints on such a host, and the ELF
// machine of a binary built for it. Preflight, the inventory's checks and
// the push all read this table, so the three names cannot drift apart.
package platform

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// Arch is one row of the table.
type Arch struct {
	Name  string      // amd64, arm64: the inventory's arch, the release URLs' <arch>, an image config's architecture
	Uname string      // what `uname -m` prints on a Linux host of this arch
	ELF   elf.Machine // e_machine of a binary built for it
}

var table = []Arch{
	{Name: "amd64", Uname: "x86_64", ELF: elf.EM_X86_64},
	{Name: "arm64", Uname: "aarch64", ELF: elf.EM_AARCH64},
}

// Names are the supported architectures, sorted: "amd64", "arm64".
func Names() []string {
	out := make([]string, len(table))
	for i, a := range table {
		out[i] = a.Name
	}
	return out
}

// Lookup returns the row of the architecture named name.
func Lookup(name string) (Arch, bool) {
	i := slices.IndexFunc(table, func(a Arch) bool { return a.Name == name })
	if i < 0 {
		return Arch{}, false
	}
	return table[i], true
}

// Supported says whether hardway installs for the architecture name.
func Supported(name string) bool { _, ok := Lookup(name); return ok }

// FromUname returns the architecture whose hosts print m for `uname -m`.
func FromUname(m string) (Arch, bool) {
	i := slices.IndexFunc(table, func(a Arch) bool { return a.Uname == m })
	if i < 0 {
		return Arch{}, false
	}
	return table[i], true
}

// fromELF returns the architecture of an ELF machine.
func fromELF(m elf.Machine) (Arch, bool) {
	i := slices.IndexFunc(table, func(a Arch) bool { return a.ELF == m })
	if i < 0 {
		return Arch{}, false
	}
	return table[i], true
}

// ErrNotELF is returned by MachineOf for a file that is no ELF binary.
var ErrNotELF = errors.New("not an ELF binary")

// MachineOf reads the ELF machine of the file at path from its header: the
// first 20 bytes, so checking a 100 MB binary costs one small read.
func MachineOf(path string) (elf.Machine, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return machine(f)
}

func machine(r io.Reader) (elf.Machine, error) {
	// e_ident (16 bytes: magic, class, data encoding, ...), e_type (2),
	// e_machine (2): the same offsets in 32- and 64-bit files.
	var h [20]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, ErrNotELF
		}
		return 0, err
	}
	if string(h[:4]) != elf.ELFMAG {
		return 0, ErrNotELF
	}
	var order binary.ByteOrder
	switch elf.Data(h[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		order = binary.LittleEndian
	case elf.ELFDATA2MSB:
		order = binary.BigEndian
	default:
		return 0, ErrNotELF
	}
	return elf.Machine(order.Uint16(h[18:20])), nil
}

// MismatchError says a binary is not built for the architecture it was
// meant for.
type MismatchError struct {
	Path string
	Want string      // the architecture the host has
	Got  elf.Machine // what the binary is built for
}

func (e *MismatchError) Error() string {
	got := e.Got.String()
	if a, ok := fromELF(e.Got); ok {
		got = a.Name + " (" + got + ")"
	}
	return fmt.Sprintf("%s is built for %s, not %s", e.Path, got, e.Want)
}

// CheckELF makes sure the file at path is an ELF binary for the
// architecture named want: a *MismatchError when it is for another, an
// error wrapping ErrNotELF when it is no ELF file at all.
func CheckELF(path, want string) error {
	a, ok := Lookup(want)
	if !ok {
		return fmt.Errorf("%q is not a supported architecture", want)
	}
	m, err := MachineOf(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if m != a.ELF {
		return &MismatchError{Path: path, Want: want, Got: m}
	}
	return nil
}

// FakeELF is the smallest file CheckELF takes for a binary of the
// architecture name (a 64-bit little-endian ELF header, nothing after it):
// for tests' stand-ins of release binaries. It panics on an unknown name.
func FakeELF(name string) []byte {
	a, ok := Lookup(name)
	if !ok {
		panic("platform: unknown architecture " + name)
	}
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_EXEC))
	binary.LittleEndian.PutUint16(h[18:], uint16(a.ELF))
	binary.LittleEndian.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	return h
}
