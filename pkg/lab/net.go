package lab

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// parseNet accepts "10.240.0" or "10.240.0.0/24" and returns the /24.
func parseNet(in string) (netip.Prefix, error) {
	s := in
	if !strings.Contains(s, "/") {
		s += ".0/24"
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("--net %q: want the first three octets of an IPv4 /24, like 10.240.0", in)
	}
	if p.Bits() != 24 || p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("--net %q: the lab needs a whole /24, like 10.240.0.0/24", in)
	}
	return p, nil
}

// The last octets before the first controller and the first worker.
const (
	controllerFirstOctet = 10
	workerFirstOctet     = 20
)

// hostAddr is the address of host i (1-based): .11, .12, ... as in the tutorial.
func hostAddr(p netip.Prefix, i int) netip.Addr {
	a := p.Addr().As4()
	a[3] = byte(controllerFirstOctet + i)
	return netip.AddrFrom4(a)
}

// workerAddr is the address of worker i (1-based): .21, .22, ... as in the tutorial.
func workerAddr(p netip.Prefix, i int) netip.Addr {
	a := p.Addr().As4()
	a[3] = byte(workerFirstOctet + i)
	return netip.AddrFrom4(a)
}

func bridgeAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	a[3] = 1
	return netip.AddrFrom4(a)
}

// subnetInUse says why p cannot be used: an address of this machine inside it
// (or a network of this machine containing it), or a route overlapping it.
func subnetInUse(p netip.Prefix) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("list interfaces: %w", err)
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok || !ip.Unmap().Is4() {
				continue
			}
			ones, _ := ipn.Mask.Size()
			if q := netip.PrefixFrom(ip.Unmap(), ones).Masked(); q.Overlaps(p) {
				return fmt.Sprintf("interface %s has %s", ifc.Name, a), nil
			}
		}
	}
	routes, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", fmt.Errorf("read routes: %w", err)
	}
	if r := routeOverlapping(string(routes), p); r != "" {
		return r, nil
	}
	return "", nil
}

// routeOverlapping returns the first non-default route of /proc/net/route
// text that overlaps p, as "route <dst> dev <if>".
func routeOverlapping(procRoute string, p netip.Prefix) string {
	sc := bufio.NewScanner(strings.NewReader(procRoute))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		dst, err1 := hexLE(f[1])
		mask, err2 := hexLE(f[7])
		if err1 != nil || err2 != nil || mask == 0 {
			continue // the default route overlaps everything and says nothing
		}
		ones := 0
		for m := mask; m != 0; m <<= 1 {
			ones++
		}
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], dst)
		q := netip.PrefixFrom(netip.AddrFrom4(a), ones).Masked()
		if q.Overlaps(p) {
			return fmt.Sprintf("route %s dev %s", q, f[0])
		}
	}
	return ""
}

// hexLE decodes the little-endian hex words of /proc/net/route to host order.
func hexLE(s string) (uint32, error) {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 {
		return 0, fmt.Errorf("bad route word %q", s)
	}
	return binary.BigEndian.Uint32([]byte{b[3], b[2], b[1], b[0]}), nil
}

func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// run runs a command and returns its error with the command and its output.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// aptSource is the Debian mirror and suite this machine's apt uses.
type aptSource struct {
	URI, Suite string
}

// debianSource finds the machine's Debian mirror in its apt configuration, so
// the lab names no host of its own: deb822 *.sources first, then the
// one-line format. A source that looks like Debian's own wins over others.
func debianSource(root string) (aptSource, error) {
	var cands []aptCandidate
	sources, _ := filepath.Glob(root + "/etc/apt/sources.list.d/*.sources")
	for _, f := range sources {
		if b, err := os.ReadFile(f); err == nil {
			cands = append(cands, parseDeb822(string(b))...)
		}
	}
	lists, _ := filepath.Glob(root + "/etc/apt/sources.list.d/*.list")
	for _, f := range append([]string{root + "/etc/apt/sources.list"}, lists...) {
		if b, err := os.ReadFile(f); err == nil {
			cands = append(cands, parseSourcesList(string(b))...)
		}
	}
	for _, c := range cands {
		if c.debian {
			return c.aptSource, nil
		}
	}
	if len(cands) > 0 {
		return cands[0].aptSource, nil
	}
	return aptSource{}, fmt.Errorf("no apt source with a release suite (like bookworm) in %s/etc/apt", root)
}

type aptCandidate struct {
	aptSource
	debian bool // keyring or URI says debian
}

// releaseSuite is a suite like bookworm, not bookworm-updates or -security.
func releaseSuite(s string) bool { return s != "" && !strings.ContainsAny(s, "-/") }

func parseDeb822(text string) []aptCandidate {
	var out []aptCandidate
	for _, stanza := range strings.Split(text, "\n\n") {
		fields := map[string]string{}
		for _, line := range strings.Split(stanza, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "#") || !strings.Contains(line, ":") {
				continue
			}
			k, v, _ := strings.Cut(line, ":")
			fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
		uris := strings.Fields(fields["uris"])
		if strings.EqualFold(fields["enabled"], "no") || !hasWord(fields["types"], "deb") || len(uris) == 0 {
			continue
		}
		for _, s := range strings.Fields(fields["suites"]) {
			if releaseSuite(s) {
				out = append(out, aptCandidate{aptSource{URI: uris[0], Suite: s},
					strings.Contains(fields["signed-by"]+" "+uris[0], "debian")})
				break
			}
		}
	}
	return out
}

func parseSourcesList(text string) []aptCandidate {
	var out []aptCandidate
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "deb" {
			continue
		}
		f = f[1:]
		if strings.HasPrefix(f[0], "[") { // [arch=amd64 signed-by=...]
			for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
				f = f[1:]
			}
			if len(f) > 0 {
				f = f[1:]
			}
		}
		if len(f) >= 2 && releaseSuite(f[1]) {
			out = append(out, aptCandidate{aptSource{URI: f[0], Suite: f[1]}, strings.Contains(f[0], "debian")})
		}
	}
	return out
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}
