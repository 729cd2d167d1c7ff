// draxr-draplugin: a small DRA kubelet plugin for the dev cluster's real node.
//
// It publishes one ResourceSlice for its node (devices gpu-0..N-1 in a pool named after the node) and
// serves kubelet's DRA gRPC API through k8s.io/dynamic-resource-allocation/kubeletplugin. On
// NodePrepareResources it writes one CDI spec per claim into --cdi-dir whose devices (one per
// allocated device and request) set environment variables naming the claim, the request and the
// device; it returns those CDI device IDs per request, so kubelet injects into each container exactly
// the devices of the requests mapped to it. NodeUnprepareResources removes the spec.
//
// Every prepare and unprepare is logged as one JSON line on stdout per claim:
//
//	{"event":"prepare","claim":{"namespace":..,"name":..,"uid":..},"requests":{"<request>":["gpu-0"]}}
//	{"event":"unprepare","claim":{...},"requests":{...}}
//
// Environment variables of a device d of request r in claim ns/name (R = r upper-cased, every
// character outside [A-Z0-9] replaced by "_"):
//
//	DRAXR_CLAIM=ns/name/uid
//	DRAXR_REQUEST_<R>=r
//	DRAXR_DEVICE_<R>_<D>=d          (one per device)
//	DRAXR_DEVICES_<R>=d1,d2,...     (all devices of the request, sorted)
//
// Each device gpu-i has the attributes index (i) and uuid (the string --uuid-prefix + i, by default
// "dev-i": the ID hack/node/deviceplugin gives its device i, as NVIDIA's DRA driver publishes as uuid
// the GPU UUID its device plugin uses as device ID; the device-plugin-to-DRA migration matches the
// two, tests/realnode/test_migration.py).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

const cdiVersion = "0.6.0"

type claimRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

type logLine struct {
	Event    string              `json:"event"`
	Claim    claimRef            `json:"claim"`
	Requests map[string][]string `json:"requests"`
	Error    string              `json:"error,omitempty"`
}

// prepared is what the plugin remembers of a prepared claim (in memory and in <state dir>/<uid>.json,
// so that an unprepare after a restart of the plugin still logs and cleans up).
type prepared struct {
	Claim    claimRef            `json:"claim"`
	Requests map[string][]string `json:"requests"`
}

type cdiEdits struct {
	Env []string `json:"env"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiSpec struct {
	CDIVersion string      `json:"cdiVersion"`
	Kind       string      `json:"kind"`
	Devices    []cdiDevice `json:"devices"`
}

type driver struct {
	name     string
	cdiDir   string
	stateDir string
	vendor   string
	class    string
	mu       sync.Mutex
	out      *json.Encoder
	cancel   context.CancelCauseFunc
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

func (d *driver) log(l logLine) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_ = d.out.Encode(l)
}

func (d *driver) specPath(uid types.UID) string {
	return filepath.Join(d.cdiDir, fmt.Sprintf("%s-%s.json", d.name, uid))
}

func (d *driver) statePath(uid types.UID) string {
	return filepath.Join(d.stateDir, string(uid)+".json")
}

func writeAtomically(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func (d *driver) prepareOne(claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, map[string][]string, error) {
	requests := map[string][]string{}
	type res struct{ request, pool, device string }
	var results []res
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		results = append(results, res{r.Request, r.Pool, r.Device})
		requests[r.Request] = append(requests[r.Request], r.Device)
	}
	for _, devs := range requests {
		sort.Strings(devs)
	}
	ref := fmt.Sprintf("%s/%s/%s", claim.Namespace, claim.Name, claim.UID)
	spec := cdiSpec{CDIVersion: cdiVersion, Kind: d.vendor + "/" + d.class}
	var devices []kubeletplugin.Device
	for _, r := range results {
		rk := envKey(r.request)
		cdiName := fmt.Sprintf("%s-%s-%s", claim.UID, rk, r.device)
		spec.Devices = append(spec.Devices, cdiDevice{
			Name: cdiName,
			ContainerEdits: cdiEdits{Env: []string{
				"DRAXR_CLAIM=" + ref,
				"DRAXR_REQUEST_" + rk + "=" + r.request,
				"DRAXR_DEVICE_" + rk + "_" + envKey(r.device) + "=" + r.device,
				"DRAXR_DEVICES_" + rk + "=" + strings.Join(requests[r.request], ","),
			}},
		})
		devices = append(devices, kubeletplugin.Device{
			Requests:     []string{r.request},
			PoolName:     r.pool,
			DeviceName:   r.device,
			CDIDeviceIDs: []string{spec.Kind + "=" + cdiName},
		})
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, requests, err
	}
	if err := writeAtomically(d.specPath(claim.UID), data); err != nil {
		return nil, requests, fmt.Errorf("write CDI spec: %w", err)
	}
	state, _ := json.Marshal(prepared{Claim: claimRef{claim.Namespace, claim.Name, string(claim.UID)}, Requests: requests})
	if err := writeAtomically(d.statePath(claim.UID), state); err != nil {
		return nil, requests, fmt.Errorf("write state: %w", err)
	}
	return devices, requests, nil
}

func (d *driver) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, claim := range claims {
		devices, requests, err := d.prepareOne(claim)
		line := logLine{Event: "prepare", Claim: claimRef{claim.Namespace, claim.Name, string(claim.UID)}, Requests: requests}
		if err != nil {
			line.Error = err.Error()
		}
		d.log(line)
		out[claim.UID] = kubeletplugin.PrepareResult{Err: err, Devices: devices}
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		var p prepared
		if data, err := os.ReadFile(d.statePath(c.UID)); err == nil {
			_ = json.Unmarshal(data, &p)
		}
		var err error
		for _, path := range []string{d.specPath(c.UID), d.statePath(c.UID)} {
			if e := os.Remove(path); e != nil && !errors.Is(e, os.ErrNotExist) {
				err = e
			}
		}
		line := logLine{Event: "unprepare", Claim: claimRef{c.Namespace, c.Name, string(c.UID)}, Requests: p.Requests}
		if line.Requests == nil {
			line.Requests = map[string][]string{}
		}
		if err != nil {
			line.Error = err.Error()
		}
		d.log(line)
		out[c.UID] = err
	}
	return out, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.cancel(fmt.Errorf("fatal: %s: %w", msg, err))
	}
}

func (d *driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func main() {
	var (
		driverName  = flag.String("driver", "gpu.draxr.dev", "DRA driver name")
		nodeName    = flag.String("node-name", "localhost", "the node whose ResourceSlice this plugin publishes")
		devices     = flag.Int("devices", 4, "number of devices (gpu-0..N-1)")
		kubeconfig  = flag.String("kubeconfig", "", "kubeconfig (the node's identity is enough)")
		cdiDir      = flag.String("cdi-dir", "", "directory the container runtime reads CDI specs from")
		registryDir = flag.String("registrar-dir", "", "kubelet's plugin registration dir (<kubelet root>/plugins_registry)")
		pluginDir   = flag.String("plugin-dir", "", "this plugin's socket dir (<kubelet root>/plugins/<driver>)")
		memory      = flag.String("memory", "16Gi", "capacity \"memory\" of each device")
		uuidPrefix  = flag.String("uuid-prefix", "dev-", "attribute uuid of device gpu-i: this prefix + i (the device plugin's ID of device i)")
	)
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *cdiDir == "" || *registryDir == "" || *pluginDir == "" {
		fmt.Fprintln(os.Stderr, "--kubeconfig, --cdi-dir, --registrar-dir and --plugin-dir are required")
		os.Exit(2)
	}
	if err := run(*driverName, *nodeName, *devices, *kubeconfig, *cdiDir, *registryDir, *pluginDir, *memory, *uuidPrefix); err != nil {
		fmt.Fprintln(os.Stderr, "draxr-draplugin:", err)
		os.Exit(1)
	}
}

func run(driverName, nodeName string, n int, kubeconfig, cdiDir, registryDir, pluginDir, memory, uuidPrefix string) error {
	mem, err := resource.ParseQuantity(memory)
	if err != nil {
		return fmt.Errorf("--memory: %w", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	stateDir := filepath.Join(pluginDir, "claims")
	for _, dir := range []string{cdiDir, registryDir, pluginDir, stateDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sigs
		cancel(fmt.Errorf("signal %v", s))
	}()

	class, _, _ := strings.Cut(driverName, ".") // CDI kind <driver>/<first label>: gpu.draxr.dev/gpu
	d := &driver{name: driverName, cdiDir: cdiDir, stateDir: stateDir, vendor: driverName, class: class, out: json.NewEncoder(os.Stdout), cancel: cancel}

	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get node %s: %w", nodeName, err)
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.KubeClient(client),
		kubeletplugin.DriverName(driverName),
		kubeletplugin.NodeName(nodeName),
		kubeletplugin.NodeUID(node.UID),
		kubeletplugin.RegistrarDirectoryPath(registryDir),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
		kubeletplugin.HealthService(false),
		kubeletplugin.GRPCVerbosity(-1),
	)
	if err != nil {
		return err
	}
	defer helper.Stop()

	var devs []resourceapi.Device
	for i := 0; i < n; i++ {
		idx := int64(i)
		uuid := fmt.Sprintf("%s%d", uuidPrefix, i)
		devs = append(devs, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index": {IntValue: &idx},
				"uuid":  {StringValue: &uuid},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: mem},
			},
		})
	}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{nodeName: {Slices: []resourceslice.Slice{{Devices: devs}}}},
	}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "draxr-draplugin: driver %s serving %d devices on node %s\n", driverName, n, nodeName)
	<-ctx.Done()
	fmt.Fprintf(os.Stderr, "draxr-draplugin: stopping: %v\n", context.Cause(ctx))
	return nil
}
