// draxr-deviceplugin: a tiny device plugin for the dev cluster's real node. It serves --resource
// (default example.com/gpu) with --devices healthy devices dev-0..N-1, registers with kubelet on
// --kubelet-socket (kubelet's device manager listens on /var/lib/kubelet/device-plugins/kubelet.sock
// whatever its --root-dir: the path is a constant of k8s.io/kubelet) and creates its own socket next
// to it. Allocate returns environment variables naming the device IDs:
//
//	DRAXR_DP_DEVICES=dev-0,dev-1   (sorted, per container)
//	DRAXR_DP_DEVICE_<ID>=<id>      (one per device; ID upper-cased, non [A-Z0-9] as "_")
//
// Each Allocate is logged as one JSON line on stdout. SIGTERM/SIGINT stop it and remove its socket.
// Observed with kubelet 1.37.2: kubelet marks the resource's devices unhealthy the moment the plugin's
// connection goes and reports allocatable 0 with its next node status (3-5 s here); capacity keeps
// the count until kubelet drops the endpoint after its 5-minute grace (endpointStopGracePeriod).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	stop    chan struct{}
	mu      sync.Mutex
	out     *json.Encoder
}

func envKey(s string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(s) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-stream.Context().Done():
	}
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := append([]string(nil), c.DevicesIds...)
		sort.Strings(ids)
		envs := map[string]string{"DRAXR_DP_DEVICES": strings.Join(ids, ",")}
		for _, id := range ids {
			envs["DRAXR_DP_DEVICE_"+envKey(id)] = id
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: envs})
		p.mu.Lock()
		_ = p.out.Encode(map[string]any{"event": "allocate", "devices": ids})
		p.mu.Unlock()
	}
	return resp, nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func main() {
	resource := flag.String("resource", "example.com/gpu", "extended resource name")
	n := flag.Int("devices", 4, "number of devices")
	kubeletSocket := flag.String("kubelet-socket", pluginapi.KubeletSocket, "kubelet's device-plugin registration socket")
	socketName := flag.String("socket-name", "draxr-deviceplugin.sock", "this plugin's socket, in the kubelet socket's directory")
	flag.Parse()
	if err := run(*resource, *n, *kubeletSocket, *socketName); err != nil {
		fmt.Fprintln(os.Stderr, "draxr-deviceplugin:", err)
		os.Exit(1)
	}
}

func run(resource string, n int, kubeletSocket, socketName string) error {
	p := &plugin{stop: make(chan struct{}), out: json.NewEncoder(os.Stdout)}
	for i := 0; i < n; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("dev-%d", i), Health: pluginapi.Healthy})
	}
	sock := filepath.Join(filepath.Dir(kubeletSocket), socketName)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	defer os.Remove(sock)
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient("unix://"+kubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: socketName, ResourceName: resource,
		})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond) // kubelet's socket may not be there yet
	}
	if err != nil {
		return fmt.Errorf("register with %s: %w", kubeletSocket, err)
	}
	fmt.Fprintf(os.Stderr, "draxr-deviceplugin: registered %s x%d on %s\n", resource, n, kubeletSocket)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	s := <-sigs
	fmt.Fprintf(os.Stderr, "draxr-deviceplugin: stopping on %v\n", s)
	close(p.stop)
	return nil
}
