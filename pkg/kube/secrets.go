package kube

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Bounds of RewriteSecrets.
const (
	SecretsPage       = 200 // Secrets per list call
	rewriteTries      = 5   // updates of one Secret that may conflict
	listRestartsLimit = 3   // lists that may start again after their continue token expired
)

// RewriteSecrets writes every Secret back unchanged, page by page, so that
// the apiserver stores it again with the encryption config's first key: an
// unchanged update is written when the stored value was decrypted with
// another key (the storage layer calls that stale) and skipped otherwise,
// so a rerun costs reads only. A conflict (someone else wrote the Secret
// meanwhile) is retried with the current object; a Secret deleted meanwhile
// is skipped. progress, if set, is told the count after each page.
func RewriteSecrets(ctx context.Context, cs kubernetes.Interface, progress func(n int)) (int, error) {
	n, cont, restarts := 0, "", 0
	for {
		list, err := cs.CoreV1().Secrets("").List(ctx, metav1.ListOptions{Limit: SecretsPage, Continue: cont})
		if apierrors.IsResourceExpired(err) && restarts < listRestartsLimit {
			// The continue token outlived etcd's compaction: list again
			// from the start; rewriting a Secret twice is harmless.
			restarts++
			cont = ""
			continue
		}
		if err != nil {
			return n, fmt.Errorf("list Secrets: %w", err)
		}
		for i := range list.Items {
			if err := rewriteSecret(ctx, cs, &list.Items[i]); err != nil {
				return n, err
			}
			n++
		}
		if progress != nil {
			progress(n)
		}
		if cont = list.Continue; cont == "" {
			return n, nil
		}
	}
}

func rewriteSecret(ctx context.Context, cs kubernetes.Interface, s *corev1.Secret) error {
	api := cs.CoreV1().Secrets(s.Namespace)
	for range rewriteTries {
		_, err := api.Update(ctx, s, metav1.UpdateOptions{})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			fresh, err := api.Get(ctx, s.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("read Secret %s/%s: %w", s.Namespace, s.Name, err)
			}
			s = fresh
		default:
			return fmt.Errorf("rewrite Secret %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	return fmt.Errorf("rewrite Secret %s/%s: it changed under every one of %d updates", s.Namespace, s.Name, rewriteTries)
}

// encryptionConfigInfo is the apiserver metric (1.30+) that names the hash
// of the encryption config it uses now: set at start and after each
// automatic reload.
const encryptionConfigInfo = "apiserver_encryption_config_controller_last_config_info"

// EncryptionConfigHash asks one apiserver which encryption config it uses:
// "sha256:<hex of the file's bytes>" (see EncryptionConfigHashOf). found is
// false when the apiserver does not report it.
func EncryptionConfigHash(ctx context.Context, cs kubernetes.Interface) (hash string, found bool, err error) {
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", false, fmt.Errorf("read /metrics: %w", err)
	}
	hash, found = ParseEncryptionConfigHash(body)
	return hash, found, nil
}

// ParseEncryptionConfigHash finds the hash label of the config-info metric
// in Prometheus text.
func ParseEncryptionConfigHash(metrics []byte) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, encryptionConfigInfo+"{")
		if !ok {
			continue
		}
		labels, _, _ := strings.Cut(rest, "}")
		for _, l := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), `hash="`); ok {
				return strings.TrimSuffix(v, `"`), true
			}
		}
	}
	return "", false
}
