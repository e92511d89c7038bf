package backup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"filippo.io/age"

	"github.com/hardway/hardway/pkg/usererr"
)

// PassphraseEnv is the environment variable a passphrase may come from: an
// environment variable never shows in `ps` or the shell's history the way a
// command-line argument does.
const PassphraseEnv = "HARDWAY_BACKUP_PASSPHRASE"

// Keys say how a backup is encrypted or decrypted: a passphrase (age's
// scrypt recipient) or age keys, never both (age allows a passphrase only
// as the sole recipient).
type Keys struct {
	PassphraseFile string   // first line is the passphrase
	Recipients     []string // age public keys (age1…), for Create
	RecipientFiles []string // files of age public keys, one a line, for Create
	IdentityFiles  []string // age identity files (AGE-SECRET-KEY-1…), for Open
	// Getenv reads PassphraseEnv; nil: os.Getenv.
	Getenv func(string) string
	// Prompt asks for the passphrase on a terminal (confirm: twice, for a
	// new backup); nil when there is no terminal.
	Prompt func(confirm bool) (string, error)
	// WorkFactor is scrypt's log2(N) for a new backup; 0: age's default
	// (18, about a second).
	WorkFactor int
}

const keysHint = "set " + PassphraseEnv + " or --passphrase-file FILE (a passphrase), or --recipient/--recipients-file (age public keys); --unencrypted only on purpose"

// passphrase returns the passphrase from the file, the environment or the
// prompt, in this order; "" when none is given.
func (k Keys) passphrase(confirm bool) (string, error) {
	if k.PassphraseFile != "" {
		b, err := os.ReadFile(k.PassphraseFile)
		if err != nil {
			return "", usererr.New(fmt.Errorf("passphrase file: %w", err), keysHint)
		}
		line, _, _ := bytes.Cut(b, []byte("\n"))
		p := strings.TrimSuffix(string(line), "\r")
		if p == "" {
			return "", usererr.New(fmt.Errorf("passphrase file %s: the first line is empty", k.PassphraseFile), keysHint)
		}
		return p, nil
	}
	getenv := k.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if p := getenv(PassphraseEnv); p != "" {
		return p, nil
	}
	if k.Prompt != nil {
		p, err := k.Prompt(confirm)
		if err != nil {
			return "", err
		}
		if p == "" {
			return "", usererr.New(errors.New("empty passphrase"), keysHint)
		}
		return p, nil
	}
	return "", nil
}

// EncryptTo returns the recipients a new backup is encrypted to: the age
// keys given, or else the passphrase. None found is an error: the caller
// decides whether an unencrypted backup was asked for.
func (k Keys) EncryptTo() ([]age.Recipient, error) {
	var rs []age.Recipient
	for _, s := range k.Recipients {
		r, err := age.ParseRecipients(strings.NewReader(s))
		if err != nil {
			return nil, usererr.WithCode(fmt.Errorf("--recipient %q: %w", s, err), usererr.CodeUsage, "an age public key starts with age1 (age-keygen -y KEYFILE prints it)")
		}
		rs = append(rs, r...)
	}
	for _, p := range k.RecipientFiles {
		f, err := os.Open(p)
		if err != nil {
			return nil, usererr.WithCode(fmt.Errorf("--recipients-file: %w", err), usererr.CodeUsage, keysHint)
		}
		r, err := age.ParseRecipients(f)
		f.Close()
		if err != nil {
			return nil, usererr.WithCode(fmt.Errorf("--recipients-file %s: %w", p, err), usererr.CodeUsage, "one age public key (age1…) a line; # starts a comment")
		}
		rs = append(rs, r...)
	}
	if len(rs) > 0 {
		if k.PassphraseFile != "" {
			return nil, usererr.WithCode(errors.New("both a passphrase file and recipients: age encrypts to a passphrase only alone"), usererr.CodeUsage, "choose one")
		}
		return rs, nil
	}
	p, err := k.passphrase(true)
	if err != nil || p == "" {
		return nil, err
	}
	r, err := age.NewScryptRecipient(p)
	if err != nil {
		return nil, err
	}
	if k.WorkFactor > 0 {
		r.SetWorkFactor(k.WorkFactor)
	}
	return []age.Recipient{r}, nil
}

// DecryptWith returns the identities that may open a backup: the identity
// files given and the passphrase, if any. None is not an error here: Open
// says whether the file needs one.
func (k Keys) DecryptWith() ([]age.Identity, error) {
	var ids []age.Identity
	for _, p := range k.IdentityFiles {
		f, err := os.Open(p)
		if err != nil {
			return nil, usererr.WithCode(fmt.Errorf("--identity: %w", err), usererr.CodeUsage, "an age identity file (age-keygen -o FILE makes one)")
		}
		is, err := age.ParseIdentities(f)
		f.Close()
		if err != nil {
			return nil, usererr.WithCode(fmt.Errorf("--identity %s: %w", p, err), usererr.CodeUsage, "an age identity file holds AGE-SECRET-KEY-1… lines")
		}
		ids = append(ids, is...)
	}
	if len(ids) > 0 && k.PassphraseFile == "" {
		return ids, nil // no prompt when a key was given
	}
	p, err := k.passphrase(false)
	if err != nil {
		return nil, err
	}
	if p != "" {
		id, err := age.NewScryptIdentity(p)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}
