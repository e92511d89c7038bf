package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/kube"
	"github.com/hardway/hardway/pkg/pki"
	"github.com/hardway/hardway/pkg/plan"
	"github.com/hardway/hardway/pkg/poll"
	"github.com/hardway/hardway/pkg/remote"
	"github.com/hardway/hardway/pkg/units"
	"github.com/hardway/hardway/pkg/usererr"
	"github.com/hardway/hardway/pkg/verify"
)

// `hardway rotate encryption-key`: the documented key rotation as seven
// resumable steps (see pkg/pki/rotation.go for the configs and the record).
//
// Waiting for an apiserver to load a config relies on the automatic reload
// hardway turns on for every apiserver (--encryption-provider-config-
// automatic-reload): the apiserver rereads the file every minute and reports
// the SHA-256 of the config it uses in the metric
// apiserver_encryption_config_controller_last_config_info. Comparing that
// hash with the pushed file's proves the load exactly, with no restart and
// so no moment without an apiserver. An apiserver that has not loaded it
// within --reload-timeout, or does not report the hash, is restarted
// instead (one at a time, only while another apiserver is ready, waiting
// for /readyz): a restart loads the file for certain.

// RotateOptions tune an encryption-key rotation.
type RotateOptions struct {
	// Provider of the new key; "" is the inventory's encryption.provider.
	Provider string
	// ReloadTimeout bounds the wait for one apiserver to reload the file
	// by itself before it is restarted; default 2m (it rereads every minute).
	ReloadTimeout time.Duration
	// PollInterval between two reads of an apiserver's metric; default 2s.
	PollInterval time.Duration
	// DryRun: Preflight prepares nothing that a step would write.
	DryRun bool
	Now    func() time.Time
}

// RotationResult is what a rotation run did, for -o json. It never holds
// a key.
type RotationResult struct {
	Provider         string            `json:"provider"`
	Key              string            `json:"key"`     // the new key: "aescbc/key2"
	OldKeys          []string          `json:"oldKeys"` // retired by step 7
	Prefix           string            `json:"prefix"`  // how every Secret starts in etcd afterwards
	ResumedAfter     int               `json:"resumedAfterStep"`
	SecretsRewritten int               `json:"secretsRewritten"`
	SecretsChecked   int               `json:"secretsChecked"`
	Complete         bool              `json:"complete"`
	DryRun           bool              `json:"dryRun"`
	Steps            []plan.StepResult `json:"steps"`
}

// rotationEnv is what a rotation needs from the cluster; unit tests fake it.
type rotationEnv interface {
	hosts() []string // the control-plane hosts, in inventory order
	readConfig(ctx context.Context, host string) (data []byte, exists bool, err error)
	writeConfig(ctx context.Context, host string, data []byte) error
	// loadedHash is the hash of the encryption config the host's
	// apiserver uses; reported is false when it does not say.
	loadedHash(ctx context.Context, host string) (hash string, reported bool, err error)
	apiserverReady(ctx context.Context, host string) error
	restartAPIServer(ctx context.Context, host string) error
	rewriteSecrets(ctx context.Context, progress func(int)) (int, error)
	scanSecrets(ctx context.Context, fn func(key string, value []byte) error) error
}

// Rotation is one run of `hardway rotate encryption-key`.
type Rotation struct {
	c   *Cluster
	o   RotateOptions
	env rotationEnv
	// preview is the rotation this run starts when none is recorded: its
	// key is made in memory by Preflight and reaches the disk only through
	// step 1's first action (never in a dry run).
	preview *pki.EncryptionRotation
	res     RotationResult
}

// EncryptionRotation prepares a rotation run; Preflight must come first.
func (c *Cluster) EncryptionRotation(o RotateOptions) *Rotation {
	if o.ReloadTimeout == 0 {
		o.ReloadTimeout = 2 * time.Minute
	}
	if o.PollInterval == 0 {
		o.PollInterval = 2 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Rotation{c: c, o: o, env: clusterRotationEnv{c}, res: RotationResult{DryRun: o.DryRun}}
}

// Result is the run's result, with the runner's steps.
func (r *Rotation) Result(pr *plan.Result) RotationResult {
	out := r.res
	if pr != nil {
		out.Steps = pr.Steps
	}
	return out
}

func (r *Rotation) logf(step int, format string, args ...any) {
	r.c.logf("[%s] "+format, append([]any{pki.RotationSteps[step]}, args...)...)
}

// current is the recorded rotation, or the one this run would start.
func (r *Rotation) current() (rot *pki.EncryptionRotation, recorded bool, err error) {
	rot, err = pki.LoadRotation(r.c.opt.State)
	if err != nil {
		return nil, false, err
	}
	if rot != nil {
		return rot, true, nil
	}
	if r.preview == nil {
		return nil, false, errors.New("no rotation: Preflight first")
	}
	return r.preview, false, nil
}

// Preflight reads the state directory and the hosts and says whether the
// rotation can start or go on: every control-plane host holds an
// encryption config whose write key the rotation knows, and every
// apiserver is ready (each must load every config before the next step).
// It only reads.
func (r *Rotation) Preflight(ctx context.Context) error {
	st := r.c.opt.State
	rot, err := pki.LoadRotation(st)
	if err != nil {
		return err
	}
	inv := r.c.Inv.Encryption.Provider
	if rot == nil {
		if r.o.Provider != "" && r.o.Provider != inv {
			return usererr.WithCode(fmt.Errorf("--provider %s, but the inventory says encryption.provider: %s", r.o.Provider, inv), usererr.CodeUsage,
				fmt.Sprintf("set 'encryption: {provider: %s}' in the inventory first (verify and pki read it), then rerun", r.o.Provider))
		}
		if _, err := pki.CheckEncryptionState(st); err != nil {
			return err
		}
		data, err := os.ReadFile(st.EncryptionConfig())
		if err != nil {
			return usererr.New(fmt.Errorf("read the encryption config: %w", err),
				"run 'hardway up' first (or 'hardway state pull' when the state directory was lost)")
		}
		local, err := pki.ParseEncryptionConfig(st.EncryptionConfig(), data)
		if err != nil {
			return err
		}
		retired, err := pki.LoadRetiredKeys(st)
		if err != nil {
			return err
		}
		if r.preview, err = pki.StartRotation(local, inv, retired, r.o.Now()); err != nil {
			return err
		}
		rot = r.preview
		r.c.logf("[rotate] from %s to %s", rot.OldKeyRefs(), rot.NewKeyRef())
	} else {
		if r.o.Provider != "" && r.o.Provider != rot.Provider {
			return usererr.WithCode(fmt.Errorf("a rotation to %s is under way (%d of %d steps done); --provider %s cannot change it",
				rot.NewKeyRef(), rot.Done, pki.RotationStepCount, r.o.Provider), usererr.CodeUsage,
				"finish it first: 'hardway rotate encryption-key' without --provider; then rotate again")
		}
		r.c.logf("[rotate] resuming the rotation from %s to %s after step %s (started %s)",
			rot.OldKeyRefs(), rot.NewKeyRef(), pki.StepName(rot.Done), rot.Started.Format(time.RFC3339))
	}
	r.res.Provider, r.res.Key, r.res.Prefix, r.res.ResumedAfter = rot.Provider, rot.NewKeyRef(), rot.Prefix(), rot.Done
	for _, k := range rot.OldKeys() {
		r.res.OldKeys = append(r.res.OldKeys, pki.KeyRef(k.Provider, k.Name))
	}

	// Every config of the rotation holds the keys of the one it started
	// from plus the new key, as the second phase's does.
	all := rot.ConfigBytes(pki.PhaseFirst)
	var problems []string
	for _, h := range r.env.hosts() {
		data, ok, err := r.env.readConfig(ctx, h)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", h, err)
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: no %s: the apiserver there was never set up", h, units.EncryptionConfig))
		default:
			if ok, why := pki.EncryptionCompatible(all, data); !ok {
				problems = append(problems, fmt.Sprintf("%s: %s: %s", h, units.EncryptionConfig, why))
			}
		}
	}
	if len(problems) > 0 {
		return usererr.New(fmt.Errorf("the hosts' encryption configs do not fit this rotation; nothing was changed:\n  %s", strings.Join(problems, "\n  ")),
			"run 'hardway up' first: it sets up every control-plane host and names a state directory that belongs to another cluster")
	}
	for _, h := range r.env.hosts() {
		if err := r.env.apiserverReady(ctx, h); err != nil {
			return usererr.New(fmt.Errorf("kube-apiserver on %s is not ready: %w", h, err),
				"every apiserver must load each new config before the next step uses it: 'hardway verify' names the problem, 'hardway up' repairs it; then rerun")
		}
	}
	return nil
}

// Steps are the rotation's seven steps.
func (r *Rotation) Steps() []plan.Step {
	return []plan.Step{
		{Name: pki.RotationSteps[1], Doc: "add the new key second on every control-plane host (every apiserver can decrypt it, none writes it)", Plan: r.planConfigure(1)},
		{Name: pki.RotationSteps[2], Doc: "wait until every apiserver has loaded it", Plan: r.planWait(2)},
		{Name: pki.RotationSteps[3], Doc: "move the new key first (new writes use it)", Plan: r.planConfigure(3)},
		{Name: pki.RotationSteps[4], Doc: "wait until every apiserver has loaded that", Plan: r.planWait(4)},
		{Name: pki.RotationSteps[5], Doc: "rewrite every Secret through the API (paginated; conflicts retried)", Plan: r.planRewrite},
		{Name: pki.RotationSteps[6], Doc: "prove from etcd that every Secret carries the new key's prefix", Plan: r.planProve},
		{Name: pki.RotationSteps[7], Doc: "retire the old keys (kept in the state directory for old backups) and remove them from the hosts", Plan: r.planRemove},
	}
}

// phaseDesc says what a phase's config holds, without a secret.
func phaseDesc(rot *pki.EncryptionRotation, phase int) string {
	switch phase {
	case pki.PhaseAdded:
		return rot.NewKeyRef() + " added second"
	case pki.PhaseFirst:
		return rot.NewKeyRef() + " first, " + rot.OldKeyRefs() + " after it"
	}
	return rot.NewKeyRef() + " alone, " + rot.OldKeyRefs() + " removed"
}

// record marks step done in the progress file.
func (r *Rotation) record(step int) plan.Action {
	return plan.Action{Kind: plan.Write, Desc: fmt.Sprintf("record step %s done in %s", pki.StepName(step), r.c.opt.State.EncryptionRotation()),
		Do: func(context.Context) error {
			rot, err := pki.LoadRotation(r.c.opt.State)
			if err != nil {
				return err
			}
			if rot == nil {
				return fmt.Errorf("%s disappeared during the rotation", r.c.opt.State.EncryptionRotation())
			}
			rot.Done = max(rot.Done, step)
			return pki.SaveRotation(r.c.opt.State, rot, r.o.Now())
		}}
}

// configActions write the phase's config into the state directory first
// (so that `up` from now on pushes the same), then to every host whose
// copy differs.
func (r *Rotation) configActions(ctx context.Context, rot *pki.EncryptionRotation, recorded bool, phase int) ([]plan.Action, error) {
	var actions []plan.Action
	st := r.c.opt.State
	want := rot.ConfigBytes(phase)
	what := phaseDesc(rot, phase)
	if local, err := os.ReadFile(st.EncryptionConfig()); err != nil || !pki.SameEncryptionConfig(local, want) {
		actions = append(actions, plan.Action{Kind: plan.Write, Desc: fmt.Sprintf("write %s (%s)", st.EncryptionConfig(), what),
			Do: func(context.Context) error { return fsutil.WriteFile(st.EncryptionConfig(), want, 0o600) }})
	}
	for _, h := range r.env.hosts() {
		if recorded {
			data, ok, err := r.env.readConfig(ctx, h)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", h, err)
			}
			if ok && bytes.Equal(data, want) {
				continue
			}
		}
		actions = append(actions, plan.Action{Host: h, Kind: plan.Write, Desc: fmt.Sprintf("write %s (%s)", units.EncryptionConfig, what),
			Do: func(ctx context.Context) error { return r.env.writeConfig(ctx, h, want) }})
	}
	return actions, nil
}

func (r *Rotation) planConfigure(step int) func(context.Context, plan.Planned) ([]plan.Action, error) {
	return func(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
		rot, recorded, err := r.current()
		if err != nil || rot.Done >= step {
			return nil, err
		}
		var actions []plan.Action
		if !recorded && step == 1 {
			actions = append(actions, plan.Action{Kind: plan.Reissue,
				Desc: fmt.Sprintf("make the new key %s (32 bytes from crypto/rand) and record the rotation in %s", rot.NewKeyRef(), r.c.opt.State.EncryptionRotation()),
				Do:   func(context.Context) error { return pki.SaveRotation(r.c.opt.State, r.preview, r.o.Now()) }})
		}
		more, err := r.configActions(ctx, rot, recorded, pki.PhaseOf(step))
		if err != nil {
			return nil, err
		}
		return append(append(actions, more...), r.record(step)), nil
	}
}

// waitActions wait for every apiserver that does not use the phase's
// config yet.
func (r *Rotation) waitActions(ctx context.Context, rot *pki.EncryptionRotation, recorded bool, step, phase int) []plan.Action {
	hash := pki.EncryptionConfigHash(rot.ConfigBytes(phase))
	var actions []plan.Action
	for _, h := range r.env.hosts() {
		if recorded {
			if got, ok, err := r.env.loadedHash(ctx, h); err == nil && ok && got == hash {
				continue
			}
		}
		actions = append(actions, plan.Action{Host: h, Kind: plan.Wait,
			Desc: fmt.Sprintf("kube-apiserver loads the config with %s (%s; it rereads the file every minute, restarted if not within %s)",
				phaseDesc(rot, phase), shortHash(hash), r.o.ReloadTimeout),
			Do: func(ctx context.Context) error { return r.waitLoaded(ctx, step, h, hash) }})
	}
	return actions
}

func (r *Rotation) planWait(step int) func(context.Context, plan.Planned) ([]plan.Action, error) {
	return func(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
		rot, recorded, err := r.current()
		if err != nil || rot.Done >= step {
			return nil, err
		}
		return append(r.waitActions(ctx, rot, recorded, step, pki.PhaseOf(step)), r.record(step)), nil
	}
}

func shortHash(h string) string {
	if len(h) > len("sha256:")+12 {
		return h[:len("sha256:")+12] + "…"
	}
	return h
}

var errNoConfigHash = errors.New("the apiserver does not report the hash of its encryption config")

// waitLoaded waits until host's apiserver uses the config with hash, and
// restarts it when it has not loaded it by itself in time.
func (r *Rotation) waitLoaded(ctx context.Context, step int, host, hash string) error {
	start := r.o.Now()
	wctx, cancel := context.WithTimeout(ctx, r.o.ReloadTimeout)
	err := poll.Until(wctx, poll.Options{Interval: r.o.PollInterval, Attempt: 10 * time.Second}, func(ctx context.Context) error {
		got, ok, err := r.env.loadedHash(ctx, host)
		switch {
		case err != nil:
			return err
		case !ok:
			return poll.Stop(errNoConfigHash)
		case got != hash:
			return fmt.Errorf("it still uses %s", shortHash(got))
		}
		return nil
	})
	cancel()
	if err == nil {
		r.logf(step, "%s: kube-apiserver uses %s after %s", host, shortHash(hash), r.o.Now().Sub(start).Round(time.Second))
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.logf(step, "%s: kube-apiserver has not loaded %s by itself (%v): restarting it", host, shortHash(hash), err)
	if err := r.gate(ctx, host); err != nil {
		return err
	}
	if err := r.env.restartAPIServer(ctx, host); err != nil {
		return err
	}
	got, ok, err := r.env.loadedHash(ctx, host)
	if err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	if ok && got != hash {
		return usererr.New(fmt.Errorf("kube-apiserver on %s uses %s after a restart, not the pushed %s", host, shortHash(got), shortHash(hash)),
			fmt.Sprintf("something else writes %s on %s, or the unit reads another file: see 'systemctl cat kube-apiserver' there", units.EncryptionConfig, host))
	}
	r.logf(step, "%s: kube-apiserver restarted with %s", host, shortHash(hash))
	return nil
}

// gate allows a restart of host's apiserver only while another apiserver
// is ready: the API stays served.
func (r *Rotation) gate(ctx context.Context, host string) error {
	var errs []string
	for _, h := range r.env.hosts() {
		if h == host {
			continue
		}
		err := r.env.apiserverReady(ctx, h)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Sprintf("%s: %v", h, err))
	}
	return usererr.New(fmt.Errorf("no other apiserver is ready, so restarting the one on %s would stop the API: %s", host, strings.Join(errs, "; ")),
		"'hardway verify' names what is wrong; rerun the rotation when another apiserver is ready")
}

func (r *Rotation) planRewrite(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	const step = 5
	rot, _, err := r.current()
	if err != nil || rot.Done >= step {
		return nil, err
	}
	return []plan.Action{{Kind: plan.Apply,
		Desc: fmt.Sprintf("rewrite every Secret through the API, %d per page: written back unchanged, each is stored with %s", kube.SecretsPage, rot.NewKeyRef()),
		Do: func(ctx context.Context) error {
			n, err := r.env.rewriteSecrets(ctx, func(n int) {
				if n >= kube.SecretsPage {
					r.logf(step, "%d Secrets so far", n)
				}
			})
			r.res.SecretsRewritten += n
			if err != nil {
				return err
			}
			r.logf(step, "%d Secrets written back", n)
			return nil
		}}, r.record(step)}, nil
}

// scanPage is the number of keys read from etcd per request.
const scanPage = 500

func (r *Rotation) planProve(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	const step = 6
	rot, _, err := r.current()
	if err != nil || rot.Done >= step {
		return nil, err
	}
	return []plan.Action{{Kind: plan.Wait,
		Desc: fmt.Sprintf("read every Secret's raw value from etcd: each must start with %s", rot.Prefix()),
		Do:   func(ctx context.Context) error { return r.prove(ctx, rot) }}, r.record(step)}, nil
}

// secretsPrefix is where the apiserver keeps Secrets in etcd.
const secretsPrefix = "/registry/secrets/"

func (r *Rotation) prove(ctx context.Context, rot *pki.EncryptionRotation) error {
	want := []byte(rot.Prefix())
	total := 0
	var bad []string
	err := r.env.scanSecrets(ctx, func(key string, value []byte) error {
		total++
		if !bytes.HasPrefix(value, want) {
			bad = append(bad, fmt.Sprintf("%s (%s)", strings.TrimPrefix(key, secretsPrefix), storedWith(value)))
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.res.SecretsChecked = total
	if len(bad) > 0 {
		// The next run must rewrite them again, not only look again.
		back, err := pki.LoadRotation(r.c.opt.State)
		if err == nil && back != nil {
			back.Done = min(back.Done, 4)
			err = pki.SaveRotation(r.c.opt.State, back, r.o.Now())
		}
		if err != nil {
			return err
		}
		shown := bad[:min(len(bad), 10)]
		return usererr.New(fmt.Errorf("%d of %d Secrets in etcd are not stored with %s: %s", len(bad), total, rot.NewKeyRef(), strings.Join(shown, ", ")),
			"rerun 'hardway rotate encryption-key': it rewrites every Secret again (an apiserver that had not loaded the new key wrote them?)")
	}
	r.logf(6, "all %d Secrets in etcd start with %s", total, rot.Prefix())
	return nil
}

// storedWith names how a raw value is stored: "secretbox/key1", or "not
// encrypted". Only the prefix is looked at; the rest may be a secret.
func storedWith(v []byte) string {
	parts := bytes.SplitN(v, []byte(":"), 6)
	if len(parts) == 6 && string(parts[0]) == "k8s" && string(parts[1]) == "enc" {
		return pki.KeyRef(string(parts[2]), string(parts[4]))
	}
	if bytes.HasPrefix(v, []byte("k8s:enc:")) {
		return "encrypted, unknown key"
	}
	return "not encrypted"
}

func (r *Rotation) planRemove(ctx context.Context, _ plan.Planned) ([]plan.Action, error) {
	const step = 7
	rot, recorded, err := r.current()
	if err != nil {
		return nil, err
	}
	st := r.c.opt.State
	var actions []plan.Action
	if rot.Done < step {
		retired, err := pki.LoadRetiredKeys(st)
		if err != nil {
			return nil, err
		}
		missing := false
		for _, k := range rot.OldKeys() {
			found := false
			for _, x := range retired {
				found = found || (x.Provider == k.Provider && x.Name == k.Name && x.Secret == k.Secret)
			}
			missing = missing || !found
		}
		if missing {
			actions = append(actions, plan.Action{Kind: plan.Write,
				Desc: fmt.Sprintf("keep %s in %s (an etcd backup from before needs them)", rot.OldKeyRefs(), st.RetiredEncryptionKeys()),
				Do:   func(context.Context) error { return pki.RetireKeys(st, rot.OldKeys(), r.o.Now()) }})
		}
		more, err := r.configActions(ctx, rot, recorded, pki.PhaseRetired)
		if err != nil {
			return nil, err
		}
		actions = append(actions, more...)
		actions = append(actions, r.waitActions(ctx, rot, recorded, step, pki.PhaseRetired)...)
		actions = append(actions, r.record(step))
	}
	actions = append(actions, plan.Action{Kind: plan.Write, Desc: "rotation complete: remove " + st.EncryptionRotation(),
		Do: func(context.Context) error {
			if err := pki.FinishRotation(st); err != nil {
				return err
			}
			r.res.Complete = true
			return nil
		}})
	return actions, nil
}

// --- the real cluster ---------------------------------------------------

type clusterRotationEnv struct{ c *Cluster }

func (e clusterRotationEnv) hosts() []string {
	var out []string
	for _, h := range e.c.Inv.ControlPlane {
		out = append(out, h.Name)
	}
	return out
}

func (e clusterRotationEnv) host(name string) (inventory.Host, error) {
	for _, h := range e.c.Inv.ControlPlane {
		if h.Name == name {
			return h, nil
		}
	}
	return inventory.Host{}, fmt.Errorf("no control-plane host %q", name)
}

func (e clusterRotationEnv) readConfig(ctx context.Context, host string) ([]byte, bool, error) {
	sh, err := e.c.Host(ctx, host)
	if err != nil {
		return nil, false, err
	}
	got, err := remote.ReadFiles(ctx, sh, []string{units.EncryptionConfig})
	if err != nil {
		return nil, false, err
	}
	return got[0].Data, got[0].Exists, nil
}

func (e clusterRotationEnv) writeConfig(ctx context.Context, host string, data []byte) error {
	sh, err := e.c.Host(ctx, host)
	if err != nil {
		return err
	}
	owner, group, _ := strings.Cut(units.Owner, ":")
	f := remote.File{Path: units.EncryptionConfig, Mode: units.ModeSecret, Owner: owner, Group: group, Data: data}
	if _, err := remote.WriteFile(ctx, sh, f); err != nil {
		return err
	}
	// As push does: the next plan then reads one stat instead of the file.
	_ = remote.RecordSums(ctx, sh, sumsCache, []remote.File{f})
	return nil
}

func (e clusterRotationEnv) loadedHash(ctx context.Context, host string) (string, bool, error) {
	h, err := e.host(host)
	if err != nil {
		return "", false, err
	}
	cs, err := e.c.Kube(h)
	if err != nil {
		return "", false, err
	}
	return kube.EncryptionConfigHash(ctx, cs)
}

func (e clusterRotationEnv) apiserverReady(ctx context.Context, host string) error {
	h, err := e.host(host)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return e.c.probe(pctx, h, units.APIServer)
}

func (e clusterRotationEnv) restartAPIServer(ctx context.Context, host string) error {
	h, err := e.host(host)
	if err != nil {
		return err
	}
	sh, err := e.c.Host(ctx, host)
	if err != nil {
		return err
	}
	// Out of the workers' load balancers while it restarts, as up's
	// restarts (lbPool).
	if err := e.c.lbPool(ctx, host); err != nil {
		return err
	}
	unit := units.APIServer + ".service"
	if err := remote.Restart(ctx, sh, unit); err != nil {
		return withJournal(ctx, sh, unit, err)
	}
	wctx, cancel := context.WithTimeout(ctx, e.c.opt.ServiceTimeout)
	defer cancel()
	if err := e.c.componentHealthy(wctx, h, units.APIServer); err != nil {
		return usererr.New(fmt.Errorf("kube-apiserver did not become ready on %s: %w\n%s", host, err, journalTail(ctx, sh, unit, 30)),
			fmt.Sprintf("see 'journalctl -u %s' on %s", unit, host))
	}
	return e.c.lbPool(ctx)
}

// readyKube is a client of the first apiserver that answers /readyz.
func (e clusterRotationEnv) readyKube(ctx context.Context) (inventory.Host, error) {
	var errs []string
	for _, h := range e.c.Inv.ControlPlane {
		if err := e.apiserverReady(ctx, h.Name); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", h.Name, err))
			continue
		}
		return h, nil
	}
	return inventory.Host{}, fmt.Errorf("no apiserver is ready: %s", strings.Join(errs, "; "))
}

func (e clusterRotationEnv) rewriteSecrets(ctx context.Context, progress func(int)) (int, error) {
	h, err := e.readyKube(ctx)
	if err != nil {
		return 0, err
	}
	cs, err := e.c.Kube(h)
	if err != nil {
		return 0, err
	}
	return kube.RewriteSecrets(ctx, cs, progress)
}

// scanner is the part of *etcd.Client that reads ranges of raw values.
type scanner interface {
	Scan(ctx context.Context, prefix string, page int64, fn func(key string, value []byte) error) error
}

func (e clusterRotationEnv) scanSecrets(ctx context.Context, fn func(key string, value []byte) error) error {
	cli, err := e.c.etcd()
	if err != nil {
		return err
	}
	defer cli.Close()
	sc, ok := cli.(scanner)
	if !ok {
		return errors.New("this etcd client cannot read ranges")
	}
	return sc.Scan(ctx, secretsPrefix, scanPage, fn)
}

// checkEncryptionAndRotation is verify's encryption check plus the state of
// an encryption-key rotation: one left half done is a warning (the daemon
// shows it), a state directory up would refuse is a failure.
func (c *Cluster) checkEncryptionAndRotation(ctx context.Context) []verify.Result {
	out := c.checkEncryption(ctx)
	note, err := pki.CheckEncryptionState(c.opt.State)
	switch {
	case err != nil:
		out = append(out, verify.Failf("", usererr.HintOf(err), "%v", err))
	case note != "":
		out = append(out, verify.Warnf("", "'hardway rotate encryption-key' finishes it", "%s", strings.TrimSuffix(note, "; 'hardway rotate encryption-key' finishes it")))
	}
	return out
}
