package smoke

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/streaming/pkg/httpstream"
)

// Port-forward and exec as kubectl does them: WebSockets first, SPDY when
// the apiserver refuses the upgrade.
func fallback(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}

// forward opens a port-forward from 127.0.0.1 (a free port) to the pod's
// port; stop ends it.
func forward(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, pod *corev1.Pod, port int) (string, func(), error) {
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return "", nil, err
	}
	sp := spdy.NewDialerForStreaming(upgrader, &http.Client{Transport: rt}, http.MethodPost, u)
	ws, err := portforward.NewSPDYOverWebsocketDialerForStreaming(u, cfg)
	if err != nil {
		return "", nil, err
	}
	dialer := portforward.NewFallbackDialerForStreaming(ws, sp, fallback)
	stopCh, readyCh := make(chan struct{}), make(chan struct{})
	var errOut bytes.Buffer
	pf, err := portforward.NewOnAddressesForStreaming(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stopCh, readyCh, io.Discard, &errOut)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	stop := func() {
		select {
		case <-stopCh:
		default:
			close(stopCh)
		}
	}
	select {
	case <-readyCh:
	case err := <-done:
		if err == nil {
			err = errors.New("ended before it was ready")
		}
		return "", nil, fmt.Errorf("%w %s", err, strings.TrimSpace(errOut.String()))
	case <-ctx.Done():
		stop()
		return "", nil, ctx.Err()
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("not ready after 30s")
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) == 0 {
		stop()
		return "", nil, fmt.Errorf("no local port: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), stop, nil
}

// execIn runs cmd in the pod's container and returns stdout and stderr.
func execIn(ctx context.Context, cs kubernetes.Interface, cfg *rest.Config, pod *corev1.Pod, container string, cmd []string) (string, error) {
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()
	sp, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return "", err
	}
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, sp, fallback)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Two buffers: the streams are copied concurrently.
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	return stdout.String() + stderr.String(), err
}
