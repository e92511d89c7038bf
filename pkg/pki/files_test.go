package pki

import (
	"encoding/base64"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hardway/hardway/pkg/usererr"
)

// TestEncryptionConfigFormat decodes the generated file generically and
// compares it with the documented apiserver.config.k8s.io/v1 format
// (kubernetes.io/docs/reference/config-api/apiserver-encryption.v1): field
// names are asserted literally, not through our own struct tags.
func TestEncryptionConfigFormat(t *testing.T) {
	for _, provider := range []string{"secretbox", "aesgcm", "aescbc"} {
		t.Run(provider, func(t *testing.T) {
			inv, dir := loadInventory(t, baseInventory+"encryption:\n  provider: "+provider+"\n", "ecdsa-p256")
			generate(t, inv, dir, Options{})
			assertMode(t, dir.EncryptionConfig(), 0o600)
			data, err := os.ReadFile(dir.EncryptionConfig())
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(data, &doc); err != nil {
				t.Fatal(err)
			}
			res := doc["resources"].([]any)[0].(map[string]any)
			first := res["providers"].([]any)[0].(map[string]any)
			key := first[provider].(map[string]any)["keys"].([]any)[0].(map[string]any)
			secret, _ := key["secret"].(string)
			raw, err := base64.StdEncoding.DecodeString(secret)
			if err != nil || len(raw) != 32 {
				t.Fatalf("secret: %d bytes, %v", len(raw), err)
			}
			want := map[string]any{
				"kind":       "EncryptionConfiguration",
				"apiVersion": "apiserver.config.k8s.io/v1",
				"resources": []any{map[string]any{
					"resources": []any{"secrets"},
					"providers": []any{
						map[string]any{provider: map[string]any{"keys": []any{
							map[string]any{"name": "key1", "secret": secret}}}},
						map[string]any{"identity": map[string]any{}},
					},
				}},
			}
			if !reflect.DeepEqual(doc, want) {
				t.Errorf("got\n%s", data)
			}
			// Round trip through the typed loader.
			c, err := LoadEncryptionConfig(dir.EncryptionConfig())
			if err != nil {
				t.Fatal(err)
			}
			if c.Provider() != provider {
				t.Errorf("provider %q", c.Provider())
			}
			again, err := c.Marshal()
			if err != nil || string(again) != string(data) {
				t.Errorf("re-marshalled differs (%v):\n%s", err, again)
			}
		})
	}
}

func TestEncryptionConfigBadKeys(t *testing.T) {
	key32 := base64.StdEncoding.EncodeToString(make([]byte, 32))
	key16 := base64.StdEncoding.EncodeToString(make([]byte, 16))
	tmpl := `kind: EncryptionConfiguration
apiVersion: apiserver.config.k8s.io/v1
resources:
  - resources:
      - secrets
    providers:
      - PROVIDER:
          keys:
            - name: key1
              secret: SECRET
      - identity: {}
`
	for _, tc := range []struct {
		name, provider, secret string
		want                   string // "" = valid
	}{
		{"valid secretbox", "secretbox", key32, ""},
		{"valid aesgcm 16", "aesgcm", key16, ""},
		{"unexpanded variable", "secretbox", "${ENCRYPTION_KEY}", `encryption-config.yaml:10:23: resources[0].providers[0].secretbox.keys[0].secret: key "key1" is not base64`},
		{"short secretbox key", "secretbox", key16, `encryption-config.yaml:10:23: resources[0].providers[0].secretbox.keys[0].secret: key "key1" is 16 bytes after base64 decoding, secretbox needs 32`},
		{"aescbc 20 bytes", "aescbc", base64.StdEncoding.EncodeToString(make([]byte, 20)), "aescbc needs 16, 24 or 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.NewReplacer("PROVIDER", tc.provider, "SECRET", tc.secret).Replace(tmpl)
			path := t.TempDir() + "/encryption-config.yaml"
			os.WriteFile(path, []byte(text), 0o600)
			_, err := LoadEncryptionConfig(path)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant %s", err, tc.want)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("error shows the key: %v", err)
			}
			if usererr.HintOf(err) == "" {
				t.Error("no hint")
			}
		})
	}

	for _, tc := range []struct{ name, text, want string }{
		{"valid, identity last", strings.NewReplacer("PROVIDER", "secretbox", "SECRET", key32).Replace(tmpl), ""},
		{"legacy kind", strings.NewReplacer("PROVIDER", "secretbox", "SECRET", key32, "kind: EncryptionConfiguration", "kind: EncryptionConfig").Replace(tmpl),
			`encryption-config.yaml:1:7: kind: is "EncryptionConfig", want EncryptionConfiguration`},
		{"typo", strings.NewReplacer("PROVIDER", "secretbox", "SECRET", key32, "providers:", "provider:").Replace(tmpl),
			"field provider not found"},
		{"identity only", "kind: EncryptionConfiguration\napiVersion: apiserver.config.k8s.io/v1\nresources:\n  - resources: [secrets]\n    providers:\n      - identity: {}\n",
			"encryption-config.yaml:6:9: resources[0].providers[0]: identity first: secrets would be stored unencrypted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := t.TempDir() + "/encryption-config.yaml"
			os.WriteFile(path, []byte(tc.text), 0o600)
			_, err := LoadEncryptionConfig(path)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestGenerateKeepsBadEncryptionConfig(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	data, _ := os.ReadFile(dir.EncryptionConfig())
	lines := strings.Split(string(data), "\n")
	for i, l := range lines {
		if strings.Contains(l, "secret:") {
			lines[i] = l[:strings.Index(l, "secret:")] + "secret: ${ENCRYPTION_KEY}"
		}
	}
	bad := strings.Join(lines, "\n")
	os.WriteFile(dir.EncryptionConfig(), []byte(bad), 0o600)
	_, err := Generate(t.Context(), inv, dir, Options{})
	if err == nil || !strings.Contains(err.Error(), dir.EncryptionConfig()+":10:") {
		t.Fatalf("error %v", err)
	}
	if b, _ := os.ReadFile(dir.EncryptionConfig()); string(b) != bad {
		t.Error("bad config overwritten")
	}
}

func TestEncryptionProviderChangeIsANote(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	before, _ := os.ReadFile(dir.EncryptionConfig())
	inv = reload(t, inv, baseInventory+"encryption:\n  provider: aescbc\n", "ecdsa-p256")
	r := byName(generate(t, inv, dir, Options{}))["encryption-config/encryption-config"]
	if r.Status != Reused || !strings.Contains(r.Note, "encrypts with secretbox, the inventory asks for aescbc") {
		t.Errorf("%s, note %q", r.Status, r.Note)
	}
	if after, _ := os.ReadFile(dir.EncryptionConfig()); string(after) != string(before) {
		t.Error("config changed")
	}
}

func TestKubeconfigs(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	ca, _ := os.ReadFile(dir.Cert("ca"))
	for _, tc := range []struct{ name, cert, user, server string }{
		{"admin", "admin", "admin", "https://api.example.test:443"},
		{"kube-controller-manager", "kube-controller-manager", "system:kube-controller-manager", "https://127.0.0.1:6443"},
		{"kube-scheduler", "kube-scheduler", "system:kube-scheduler", "https://127.0.0.1:6443"},
		// The workers' components go through the node-local load balancer
		// (the default with workers and three control-plane hosts); the
		// admin keeps apiServerEndpoint.
		{"kube-proxy", "kube-proxy", "system:kube-proxy", "https://127.0.0.1:6443"},
		{"w-0", "kubelet-w-0", "system:node:w-0", "https://127.0.0.1:6443"},
		{"w-1", "kubelet-w-1", "system:node:w-1", "https://127.0.0.1:6443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := dir.Kubeconfig(tc.name)
			assertMode(t, path, 0o600)
			cfg, err := clientcmd.LoadFromFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx := cfg.Contexts[cfg.CurrentContext]
			if ctx == nil {
				t.Fatalf("no current context %q", cfg.CurrentContext)
			}
			cl, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
			if cl == nil || user == nil || ctx.Cluster != "test" || ctx.AuthInfo != tc.user {
				t.Fatalf("context %+v", ctx)
			}
			if cl.Server != tc.server {
				t.Errorf("server %s, want %s", cl.Server, tc.server)
			}
			cert, _ := os.ReadFile(dir.Cert(tc.cert))
			key, _ := os.ReadFile(dir.Key(tc.cert))
			if string(cl.CertificateAuthorityData) != string(ca) || string(user.ClientCertificateData) != string(cert) ||
				string(user.ClientKeyData) != string(key) {
				t.Error("embedded data differs from the state files")
			}
			// client-go accepts it as a client configuration.
			rc, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil || rc.Host != tc.server {
				t.Errorf("rest config: %v %v", rc, err)
			}
		})
	}
}

func TestServiceAccount(t *testing.T) {
	inv, dir := loadInventory(t, baseInventory, "ecdsa-p256")
	generate(t, inv, dir, Options{})
	assertMode(t, dir.Key(ServiceAccount), 0o600)
	key, _ := os.ReadFile(dir.Key(ServiceAccount))
	pub, _ := os.ReadFile(PublicKeyPath(dir, ServiceAccount))

	os.Remove(PublicKeyPath(dir, ServiceAccount))
	r := byName(generate(t, inv, dir, Options{}))["key-pair/service-account"]
	if r.Status != Updated {
		t.Errorf("pub rewritten: %s", r.Status)
	}
	if b, _ := os.ReadFile(PublicKeyPath(dir, ServiceAccount)); string(b) != string(pub) {
		t.Error("rewritten public key differs")
	}
	if b, _ := os.ReadFile(dir.Key(ServiceAccount)); string(b) != string(key) {
		t.Error("private key changed")
	}
	if c := Check(inv, dir, time.Now()); AnyFailed(c) {
		t.Errorf("check: %+v", c)
	}

	os.Remove(dir.Key(ServiceAccount))
	_, err := Generate(t.Context(), inv, dir, Options{})
	if err == nil || !strings.Contains(usererr.HintOf(err), "invalidates every service-account token") {
		t.Errorf("missing key: %v", err)
	}
	if _, err := os.Stat(dir.Key(ServiceAccount)); err == nil {
		t.Error("a new key was made")
	}
}

// With network.apiServerLoadBalancer none the workers use apiServerEndpoint,
// as before there was a load balancer.
func TestKubeconfigsWithoutNodeLocalLB(t *testing.T) {
	text := strings.Replace(baseInventory, "  apiServerEndpoint: api.example.test:443\n",
		"  apiServerEndpoint: api.example.test:443\n  apiServerLoadBalancer: none\n", 1)
	inv, _ := loadInventory(t, text, "ecdsa-p256")
	for _, k := range Kubeconfigs(inv) {
		want := "https://api.example.test:443"
		if k.Name == "kube-controller-manager" || k.Name == "kube-scheduler" {
			want = LocalAPIServerURL
		}
		if k.Server != want {
			t.Errorf("%s: server %s, want %s", k.Name, k.Server, want)
		}
	}
}
