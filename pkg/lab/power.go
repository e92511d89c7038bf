package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/ssh"
)

// PowerOff takes host name away entirely, as a power cut or a pulled cable
// would: first its link to the lab's bridge goes down, so nothing it says
// reaches anyone (no FIN, no RST: its peers' connections hang, and new ones
// find no host), then its container stops, and every process in it with it.
// Its disk (the overlay), address and network namespace stay, so PowerOn
// boots the same host again.
func (l *Lab) PowerOff(ctx context.Context, name string) error {
	_, h, err := l.labHost(name)
	if err != nil {
		return err
	}
	if err := run(ctx, "ip", "link", "set", h.Veth, "down"); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// The supervisor restarts a container that reboots; this one stays off.
	if err := os.WriteFile(h.stoppingFile(), nil, 0o600); err != nil {
		return err
	}
	if err := stopHost(*h); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	l.logf("%s %s: powered off", h.Name, h.Address)
	return nil
}

// PowerOn boots a host PowerOff stopped, brings its link up and waits until
// its sshd answers with its own host key and its systemd runs.
func (l *Lab) PowerOn(ctx context.Context, name string) error {
	st, h, err := l.labHost(name)
	if err != nil {
		return err
	}
	if alive(h.SupervisorPID, h.SupervisorStart) || nspawnPID(*h) != 0 {
		return fmt.Errorf("%s is running: power it off first", name)
	}
	pub, err := os.ReadFile(filepath.Join(h.rootfs(), "etc/ssh/ssh_host_ed25519_key.pub"))
	if err != nil {
		return fmt.Errorf("%s: host key: %w", name, err)
	}
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey(pub)
	if err != nil {
		return fmt.Errorf("%s: host key: %w", name, err)
	}
	key, err := l.clientKey()
	if err != nil {
		return err
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		return err
	}
	if err := os.Remove(h.stoppingFile()); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := run(ctx, "ip", "link", "set", h.Veth, "up"); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	t0 := time.Now()
	i := -1
	for j := range st.Hosts {
		if st.Hosts[j].Name == name {
			i = j
		}
	}
	if err := l.startHost(st, i); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	state, err := waitHost(ctx, st.Hosts[i], signer, hostKey, l.cfg.BootTimeout)
	if err != nil {
		return fmt.Errorf("%s (%s): %w\nconsole (last lines):\n%s", name, h.Address, err, tail(h.consoleLog(), 15))
	}
	l.logf("%s %s: powered on, %s after %.1fs", h.Name, h.Address, state, time.Since(t0).Seconds())
	return nil
}

// labHost loads the lab's state and finds host name in it.
func (l *Lab) labHost(name string) (*state, *hostState, error) {
	st, err := loadState(l.statePath())
	if err != nil {
		return nil, nil, err
	}
	if st == nil {
		return nil, nil, fmt.Errorf("lab %q is not up", l.cfg.Prefix)
	}
	for i := range st.Hosts {
		if st.Hosts[i].Name == name {
			return st, &st.Hosts[i], nil
		}
	}
	return nil, nil, fmt.Errorf("lab %q has no host %s", l.cfg.Prefix, name)
}
