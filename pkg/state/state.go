// Package state names the files of hardway's local state directory.
//
// The state directory (default .hardway next to the inventory) holds the CA
// and every key: it must be backed up and must not be committed. Naming its
// files in one place keeps pki, render, push and verify agreeing on them.
package state

import "path/filepath"

// Dir is a state directory.
type Dir string

// PKIDir holds <name>.crt and <name>.key for every certificate.
func (d Dir) PKIDir() string { return filepath.Join(string(d), "pki") }

// Cert is the certificate file of the named entry of the PKI table.
func (d Dir) Cert(name string) string { return filepath.Join(d.PKIDir(), name+".crt") }

// Key is the private key file of the named entry (0600).
func (d Dir) Key(name string) string { return filepath.Join(d.PKIDir(), name+".key") }

// KubeconfigDir holds <name>.kubeconfig.
func (d Dir) KubeconfigDir() string { return filepath.Join(string(d), "kubeconfigs") }

// Kubeconfig is the kubeconfig file of a component or user (admin, kube-scheduler, ...).
func (d Dir) Kubeconfig(name string) string {
	return filepath.Join(d.KubeconfigDir(), name+".kubeconfig")
}

// EncryptionConfig is the apiserver's EncryptionConfiguration (holds the key).
func (d Dir) EncryptionConfig() string { return filepath.Join(string(d), "encryption-config.yaml") }

// LogDir holds one log file per run.
func (d Dir) LogDir() string { return filepath.Join(string(d), "logs") }

// PodSubnets records the pod subnet of every worker (pkg/podnet): kept so
// that removing a worker never renumbers another.
func (d Dir) PodSubnets() string { return filepath.Join(string(d), "pod-subnets.yaml") }

// EncryptionRotation records the progress of an encryption-key rotation
// (`hardway rotate encryption-key`) while one is under way; it holds keys.
func (d Dir) EncryptionRotation() string { return filepath.Join(string(d), "encryption-rotation.yaml") }

// Upgrade records the progress of 'hardway upgrade apply' while one is
// under way: its target, its phases and which are done.
func (d Dir) Upgrade() string { return filepath.Join(string(d), "upgrade.yaml") }

// RetiredEncryptionKeys holds every key a rotation took off the hosts: an
// etcd backup made before the rotation needs it to decrypt its Secrets.
func (d Dir) RetiredEncryptionKeys() string {
	return filepath.Join(string(d), "encryption-retired-keys.yaml")
}

// CARotation records the progress of a CA rotation (`hardway rotate ca
// --which WHICH`) while one is under way; it holds the new CA's key.
func (d Dir) CARotation(which string) string {
	return filepath.Join(string(d), "ca-rotation-"+which+".yaml")
}
