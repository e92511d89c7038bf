package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/usererr"
)

// pendingSuffix names the redo record of a key pair being replaced.
const pendingSuffix = ".pending"

// pendingPair is the redo record's content: the whole new pair, exactly as
// it is to be written.
type pendingPair struct {
	Cert string `json:"cert"`
	Key  string `json:"key"`
}

func (d Dir) pending(name string) string { return filepath.Join(d.PKIDir(), name+pendingSuffix) }

// WritePair replaces the certificate and key of name. Two files cannot be
// renamed at once, and a process killed between the two writes would leave
// a key that does not match its certificate: every later command that loads
// the pair (the etcd client of a resumed CA rotation, a CA that signs) would
// fail on it. So the new pair is first written whole, atomically, to a redo
// record (<name>.pending, 0600: it holds the key); then the key and the
// certificate; then the record goes. A crash leaves either the old pair (no
// record) or a record that the next Lock finishes writing.
func (d Dir) WritePair(name string, certPEM, keyPEM []byte) error {
	rec, err := json.Marshal(pendingPair{Cert: string(certPEM), Key: string(keyPEM)})
	if err != nil {
		return err
	}
	p := d.pending(name)
	if err := fsutil.WriteFile(p, rec, 0o600); err != nil {
		return err
	}
	if err := d.writePairFiles(name, certPEM, keyPEM); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

func (d Dir) writePairFiles(name string, certPEM, keyPEM []byte) error {
	if err := fsutil.WriteFile(d.Key(name), keyPEM, 0o600); err != nil {
		return err
	}
	return fsutil.WriteFile(d.Cert(name), certPEM, 0o644)
}

// PendingPairs names the pairs whose write a killed process left unfinished.
func (d Dir) PendingPairs() []string {
	recs, _ := filepath.Glob(filepath.Join(d.PKIDir(), "*"+pendingSuffix))
	var out []string
	for _, p := range recs {
		out = append(out, strings.TrimSuffix(filepath.Base(p), pendingSuffix))
	}
	return out
}

// FinishPairs completes every pair write that a killed process left behind
// (see WritePair) and returns their names. Lock calls it, so every command
// that uses the state directory sees whole pairs.
func (d Dir) FinishPairs() ([]string, error) {
	recs, err := filepath.Glob(filepath.Join(d.PKIDir(), "*"+pendingSuffix))
	if err != nil {
		return nil, err
	}
	var done []string
	for _, p := range recs {
		name := strings.TrimSuffix(filepath.Base(p), pendingSuffix)
		b, err := os.ReadFile(p)
		var rec pendingPair
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err == nil && (rec.Cert == "" || rec.Key == "") {
			err = errors.New("the record lacks the certificate or the key")
		}
		if err != nil {
			return done, usererr.New(fmt.Errorf("finish the interrupted write of %s: %s: %w", name, p, err),
				"the record is written atomically, so this is damage from outside hardway: restore the state directory from a backup, or 'hardway state pull'")
		}
		if err := d.writePairFiles(name, []byte(rec.Cert), []byte(rec.Key)); err != nil {
			return done, fmt.Errorf("finish the interrupted write of %s: %w", name, err)
		}
		if err := os.Remove(p); err != nil {
			return done, fmt.Errorf("remove %s: %w", p, err)
		}
		done = append(done, name)
	}
	return done, nil
}
