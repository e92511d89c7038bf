package pki

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"path/filepath"

	"github.com/hardway/hardway/pkg/fsutil"
	"github.com/hardway/hardway/pkg/inventory"
	"github.com/hardway/hardway/pkg/state"
	"github.com/hardway/hardway/pkg/usererr"
)

// ServiceAccount is the name of the key pair the apiserver signs
// service-account tokens with (service-account.key) and verifies them with
// (service-account.pub, also given to the controller-manager's key file).
const ServiceAccount = "service-account"

// PublicKeyPath is <state>/pki/<name>.pub.
func PublicKeyPath(dir state.Dir, name string) string {
	return filepath.Join(dir.PKIDir(), name+".pub")
}

// ensureServiceAccount creates the key pair once and keeps it: a new key
// would invalidate every service-account token in the cluster. The public
// half is derived from the private key, so it is rewritten (identically)
// only when missing or wrong.
func ensureServiceAccount(inv *inventory.Inventory, dir state.Dir, allowNew bool) (Result, error) {
	keyPath, pubPath := dir.Key(ServiceAccount), PublicKeyPath(dir, ServiceAccount)
	res := Result{Name: ServiceAccount, Kind: KindKeyPair, Path: keyPath, Status: Reused}
	keyPEM, err := readOptional(keyPath)
	if err != nil {
		return res, err
	}
	pubPEM, err := readOptional(pubPath)
	if err != nil {
		return res, err
	}
	if keyPEM == nil {
		if pubPEM != nil && !allowNew {
			return res, usererr.Errorf(
				PullHint(inv)+";\n'hardway certs generate --new-service-account-key' makes a new pair on purpose,\n"+
					"which invalidates every service-account token the cluster has issued",
				"%s is missing next to %s", keyPath, pubPath)
		}
		kr, err := keyRequest(inv.PKI.Algorithm)
		if err != nil {
			return res, err
		}
		k, err := kr.Generate()
		if err != nil {
			return res, fmt.Errorf("generate %s key: %w", ServiceAccount, err)
		}
		if keyPEM, err = marshalKey(k); err != nil {
			return res, err
		}
		if err := fsutil.WriteFile(keyPath, keyPEM, 0o600); err != nil {
			return res, err
		}
		res.Status = Created
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return res, usererr.Errorf("restore it from your backup of the state directory", "%s: %w", keyPath, err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return res, fmt.Errorf("%s: %w", keyPath, err)
	}
	want := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
	if !fsutil.SameContent(pubPath, want) {
		if err := fsutil.WriteFile(pubPath, want, 0o644); err != nil {
			return res, err
		}
		if res.Status == Reused {
			res.Status, res.Reason = Updated, "public key rewritten from the private key"
		}
	}
	return res, nil
}

// marshalKey writes a private key in the PEM form cfssl writes its own keys
// in (SEC 1 for ECDSA, PKCS #1 for RSA), which every Kubernetes component reads.
func marshalKey(k any) ([]byte, error) {
	switch k := k.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
	}
	return nil, fmt.Errorf("unsupported key type %T", k)
}
