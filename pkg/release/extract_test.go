package release

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func tarHdr(name string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}
}

func TestExtractMembers(t *testing.T) {
	const top = "etcd-v3.6.16-linux-amd64"
	wanted := []string{top + "/etcd", top + "/etcdctl", top + "/etcdutl"}
	good := func(extra ...tarEntry) []byte { return etcdTarball(t, "v3.6.16", "amd64", extra) }
	for _, tc := range []struct {
		name string
		tgz  []byte
		want string // "" = success
	}{
		{"official layout with docs", good(), ""},
		{"extra files are skipped", good(tarEntry{hdr: tarHdr(top + "/bin/evil"), body: []byte("x")}, tarEntry{hdr: tarHdr("other/etcd"), body: []byte("y")}), ""},
		{"traversal", good(tarEntry{hdr: tarHdr(top + "/../../etc/passwd"), body: []byte("x")}), "escapes the archive"},
		{"traversal hidden by clean", good(tarEntry{hdr: tarHdr("a/../" + top + "/x"), body: []byte("x")}), "escapes the archive"},
		{"absolute path", good(tarEntry{hdr: tarHdr("/usr/local/bin/etcd"), body: []byte("x")}), "absolute path"},
		{"symlink", good(tarEntry{hdr: tar.Header{Name: top + "/etcd-link", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"}}), "is a link"},
		{"hard link", good(tarEntry{hdr: tar.Header{Name: top + "/etcd2", Typeflag: tar.TypeLink, Linkname: top + "/etcd"}}), "is a link"},
		{"symlink named like a binary", makeTarGz(t, []tarEntry{
			{hdr: tar.Header{Name: top + "/etcd", Typeflag: tar.TypeSymlink, Linkname: "/bin/sh"}}}), "is a link"},
		{"char device", good(tarEntry{hdr: tar.Header{Name: top + "/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}), "not a regular file"},
		{"fifo", good(tarEntry{hdr: tar.Header{Name: top + "/fifo", Typeflag: tar.TypeFifo}}), "not a regular file"},
		{"oversized", makeTarGz(t, []tarEntry{{hdr: tar.Header{Name: top + "/etcd", Typeflag: tar.TypeReg, Size: maxMemberSize + 1}}}), "over the"},
		{"duplicate", good(tarEntry{hdr: tarHdr(top + "/etcd"), body: []byte("second")}), "appears twice"},
		{"missing etcdutl", makeTarGz(t, []tarEntry{
			{hdr: tarHdr(top + "/etcd"), body: []byte("a")}, {hdr: tarHdr(top + "/etcdctl"), body: []byte("b")}}), "missing " + top + "/etcdutl"},
		{"not gzip", []byte("PK\x03\x04 a zip"), "not gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			archive := filepath.Join(dir, "etcd.tar.gz")
			writeFile(t, archive, tc.tgz)
			out, err := extractMembers(archive, "etcd.tar.gz", "releases.etcd", wanted, filepath.Join(dir, "tmp"))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				if left, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(left) != 0 {
					t.Errorf("refused archive left %d files", len(left))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 3 {
				t.Fatalf("extracted %d files", len(out))
			}
			for _, w := range wanted {
				data, _ := os.ReadFile(out[w].tmp)
				if b := filepath.Base(w); !strings.HasPrefix(string(data), "#!fake "+b+" v3.6.16") || out[w].SHA256 != hexSHA256(data) {
					t.Errorf("%s: wrong content or digest", w)
				}
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 3 {
				t.Errorf("%d files unpacked, want exactly 3", len(ents))
			}
		})
	}
}
