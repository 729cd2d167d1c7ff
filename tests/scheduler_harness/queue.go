// The -queue mode: kube-scheduler's own scheduling queue (pkg/scheduler/backend/queue's
// PriorityQueue, the exact module version in go.mod) driven through generated sequences of
// cluster events and scheduling attempts, so that draxr's queue (operator/draxr/queue.py, fed by
// its watch handlers) can be compared with it after every step
// (operator/draxr_dev/queue_diff, tests/differential/test_queue_differential.py).
//
// Input on stdin: one JSON list of sequences:
//
//	{"name": "...",
//	 "objects": [{"kind": "<kind>", "object": <object>}],  // the cluster before the first step
//	 "steps": [<step>]}
//
// kinds: Pod, Node, ResourceClaim, ResourceSlice, DeviceClass, PersistentVolume,
// PersistentVolumeClaim, StorageClass (v1 JSON; resource.k8s.io/v1 for DRA). Every object
// carries metadata.resourceVersion, increasing per object (the claims' assume cache compares
// them). Pods with spec.nodeName are assigned; the others are pending pods of the default
// profile (they are added to the queue before the first step, in the order given). Steps:
//
//	{"op": "upsert", "kind": "...", "object": {...}}   // created or updated (old: the informer's)
//	{"op": "delete", "kind": "...", "object": {...}}
//	{"op": "pop"}                                      // Pop, when something is poppable
//	{"op": "fail", "pop": <index of a pop step>, "plugins": ["NodeResourcesFit", ...]}
//	        // the attempt of that pop ends unschedulable with those rejecting plugins, or
//	        // with an error when "plugins" is empty (handleSchedulingFailure); with "byPod": true
//	        // and "pick": n, the n-th (modulo) of the plugins the popped pod's spec may be
//	        // rejected by (podRejections), reported as the step's "plugins"
//	{"op": "bind", "pop": <index>, "node": "<node>", "rv": "<resourceVersion>"}
//	        // the attempt binds: Done, then the bound pod's update event (the pod's current
//	        // object with spec.nodeName and that resourceVersion)
//	{"op": "nominate", "pop": <index>, "nominated": "<node>", "rv": "<resourceVersion>"}
//	        // AddNominatedPod for the pod of that pop (PostFilter chose a node), then its update
//	        // (status.nominatedNodeName set); the attempt goes on
//	{"op": "advance", "seconds": <float>}              // the fake clock; then the backoff and
//	                                                   // the unschedulable-pods flushes
//
// A fail, bind or nominate whose pop took nothing, or that names a pop already ended, is a no-op.
// An upsert of a pod keeps the spec.nodeName and status.nominatedNodeName of its current object
// when it has none (the generator cannot know which pod a pop took).
//
// What is driven, as pkg/scheduler wires it: the default profile's framework (main.go's
// defaultProfile, the in-tree registry, an informer factory on a fake clientset holding the
// objects, the DRA manager with its claims' assume cache), the queue built as scheduler.New
// builds it (the profile's QueueSortFunc, PreEnqueue plugins, and the queueing hints of every
// plugin's EventsToRegister, buildQueueingHintMap copied from scheduler.go) with a fake clock,
// and every event delivered as eventhandlers.go delivers it (Add/Update/Delete for pods,
// NodeSchedulingPropertiesChange for node updates, MoveAllToActiveOrBackoffQueue for the
// others), once the informers (and the claims' assume cache) hold the new object, so that the
// hints read the same state the event carries. The backoff and unschedulable-pod flushes that
// Run's goroutines do on a timer are done after every "advance" through the queue's exported API
// (flushUnschedulableEntitiesLeftover and flushBackoffQCompleted are unexported): the pods whose
// unschedulable time exceeds podMaxInUnschedulablePodsDuration are marked flushed and moved with
// the UnschedulableTimeout wildcard event (what flushUnschedulableEntitiesLeftover does), then the
// backoff-completed pods of the backoffQ are moved to the activeQ with Activate (what
// flushBackoffQCompleted does; the same moveToActiveQ). Backoff and flush are draxr's defaults
// (-queue-initial-backoff 1s, -queue-max-backoff 60s, -queue-max-unschedulable 60s), not
// kube-scheduler's (1s, 10s, 5m).
//
// Output on stdout: one JSON list, one result per sequence:
//
//	{"name": "...", "steps": [{"active": [...], "backoff": [...], "errorBackoff": [...],
//	  "unschedulable": [...], "inFlight": [...], "popped": "<pod name>", "flushed": [...]}]}
//
// pod names, sorted: "active" the activeQ, "backoff" the backoffQ's pods that Pop may take when the
// activeQ is empty (SchedulerPopFromBackoffQ: those rejected by a plugin), "errorBackoff" the
// backoffQ's pods after an error (never popped before their backoff ends), "unschedulable" the
// unschedulable pods (gated ones too), "inFlight" popped and not yet back, "flushed" (advance) the
// unschedulable pods the flush moved (gated ones stay unschedulable); or {"name": "...",
// "error": "..."}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	internalqueue "k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
	testingclock "k8s.io/utils/clock/testing"
)

// init runs the -queue mode before main (main.go's flags and modes stay as they are).
func init() {
	for _, arg := range os.Args[1:] {
		if arg == "-queue" || arg == "--queue" {
			os.Exit(queueMain(os.Args[1:]))
		}
	}
}

type queueObject struct {
	Kind   string          `json:"kind"`
	Object json.RawMessage `json:"object"`
}

type queueStep struct {
	Op      string          `json:"op"`
	Kind    string          `json:"kind,omitempty"`
	Object  json.RawMessage `json:"object,omitempty"`
	Pop     *int            `json:"pop,omitempty"`
	Plugins []string        `json:"plugins,omitempty"`
	// fail: the rejecting plugin chosen from the popped pod's spec (podRejections), the pick-th
	ByPod   bool    `json:"byPod,omitempty"`
	Pick    int     `json:"pick,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	// bind and nominate: where, and the pod's new resourceVersion
	Node      string `json:"node,omitempty"`
	Nominated string `json:"nominated,omitempty"`
	RV        string `json:"rv,omitempty"`
}

type queueSequence struct {
	Name    string        `json:"name"`
	Objects []queueObject `json:"objects"`
	Steps   []queueStep   `json:"steps"`
}

type queueState struct {
	Active        []string `json:"active"`
	Backoff       []string `json:"backoff"`
	ErrorBackoff  []string `json:"errorBackoff"`
	Unschedulable []string `json:"unschedulable"`
	InFlight      []string `json:"inFlight"`
	Popped        string   `json:"popped,omitempty"`
	// advance: the unschedulable pods the flush moved (with the UnschedulableTimeout wildcard
	// event, which every pod in flight replays when its attempt ends), gated ones included
	Flushed []string `json:"flushed,omitempty"`
	// fail: the rejecting plugins
	Plugins []string `json:"plugins,omitempty"`
}

type queueResult struct {
	Name  string        `json:"name"`
	Steps []*queueState `json:"steps,omitempty"`
	Error string        `json:"error,omitempty"`
}

type queueConfig struct {
	initialBackoff, maxBackoff, maxUnschedulable time.Duration
	timeout                                      time.Duration
}

func queueMain(args []string) int {
	fs := flag.NewFlagSet("scheduler-harness -queue", flag.ContinueOnError)
	fs.Bool("queue", true, "run the scheduling queue mode")
	parallel := fs.Int("parallel", runtime.GOMAXPROCS(0)*2, "sequences run concurrently (each has its own clientset, informers, framework and queue)")
	cfg := queueConfig{}
	fs.DurationVar(&cfg.initialBackoff, "queue-initial-backoff", time.Second, "podInitialBackoffDuration (draxr's backoff_initial_seconds)")
	fs.DurationVar(&cfg.maxBackoff, "queue-max-backoff", 60*time.Second, "podMaxBackoffDuration (draxr's backoff_max_seconds)")
	fs.DurationVar(&cfg.maxUnschedulable, "queue-max-unschedulable", 60*time.Second, "podMaxInUnschedulablePodsDuration (draxr's unschedulable_flush_seconds)")
	fs.DurationVar(&cfg.timeout, "timeout", 120*time.Second, "per-sequence timeout")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	metrics.Register()
	var seqs []*queueSequence
	data, err := io.ReadAll(bufio.NewReader(os.Stdin))
	if err == nil {
		err = json.Unmarshal(data, &seqs)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "scheduler-harness -queue: reading sequences: %v\n", err)
		return 2
	}
	registry := frameworkplugins.NewInTreeRegistry()
	out := make([]*queueResult, len(seqs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range max(1, *parallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				out[i] = runQueueSequence(registry, cfg, seqs[i])
			}
		}()
	}
	for i := range seqs {
		work <- i
	}
	close(work)
	wg.Wait()
	writeJSON(out)
	return 0
}

// queueRun is one sequence's cluster: the fake clientset, its informers, the framework and the queue.
type queueRun struct {
	ctx        context.Context
	logger     klog.Logger
	client     *fake.Clientset
	stores     queueStores
	cfg        queueConfig
	claimCache *assumecache.AssumeCache
	queue      *internalqueue.PriorityQueue
	clock      *testingclock.FakeClock
	// the entity each pop step took (nil: nothing), and whether its attempt ended
	popped map[int]framework.QueuedEntityInfo
	ended  map[int]bool
	// the pods the last advance flushed, the plugins of the last fail
	flushed []string
	plugins []string
}

func runQueueSequence(registry frameworkruntime.Registry, cfg queueConfig, seq *queueSequence) (res *queueResult) {
	res = &queueResult{Name: seq.Name}
	defer func() {
		if p := recover(); p != nil {
			res.Steps = nil
			res.Error = fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	steps, err := queueSequenceSteps(registry, cfg, seq)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	res.Steps = steps
	return res
}

func decodeObject(kind string, raw json.RawMessage) (apiruntime.Object, error) {
	var obj apiruntime.Object
	switch kind {
	case "Pod":
		obj = &v1.Pod{}
	case "Node":
		obj = &v1.Node{}
	case "ResourceClaim":
		obj = &resourceapi.ResourceClaim{}
	case "ResourceSlice":
		obj = &resourceapi.ResourceSlice{}
	case "DeviceClass":
		obj = &resourceapi.DeviceClass{}
	case "PersistentVolume":
		obj = &v1.PersistentVolume{}
	case "PersistentVolumeClaim":
		obj = &v1.PersistentVolumeClaim{}
	case "StorageClass":
		obj = &storagev1.StorageClass{}
	default:
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", kind, err)
	}
	if pod, ok := obj.(*v1.Pod); ok && pod.UID == "" {
		pod.UID = types.UID("uid-" + pod.Namespace + "-" + pod.Name)
	}
	return obj, nil
}

func queueSequenceSteps(registry frameworkruntime.Registry, cfg queueConfig, seq *queueSequence) ([]*queueState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	logger := klog.FromContext(ctx).WithValues("sequence", seq.Name)
	ctx = klog.NewContext(ctx, logger)

	var initial []apiruntime.Object
	var pending []*v1.Pod
	for i, o := range seq.Objects {
		obj, err := decodeObject(o.Kind, o.Object)
		if err != nil {
			return nil, fmt.Errorf("object #%d: %w", i, err)
		}
		initial = append(initial, obj)
		if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName == "" {
			pending = append(pending, pod)
		}
	}
	client := fake.NewClientset(initial...)
	factory := scheduler.NewInformerFactory(client, 0, nil)
	defer factory.Shutdown()
	defer cancel()

	gates := utilfeature.DefaultFeatureGate
	schedulerCache := internalcache.New(ctx, nil, gates.Enabled(features.GenericWorkload), gates.Enabled(features.CompositePodGroup))
	var draManager fwk.SharedDRAManager
	var claimCache *assumecache.AssumeCache
	var draSynced []cache.InformerSynced
	if gates.Enabled(features.DynamicResourceAllocation) {
		claimCache = assumecache.NewAssumeCache(logger, factory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
		trackerOpts := resourceslicetracker.Options{
			EnableDeviceTaintRules:   gates.Enabled(features.DRADeviceTaintRules),
			EnableConsumableCapacity: gates.Enabled(features.DRAConsumableCapacity),
			SliceInformer:            factory.Resource().V1().ResourceSlices(),
			KubeClient:               client,
		}
		if trackerOpts.EnableDeviceTaintRules {
			trackerOpts.TaintInformer = factory.Resource().V1().DeviceTaintRules()
		}
		tracker, err := resourceslicetracker.StartTracker(ctx, trackerOpts)
		if err != nil {
			return nil, fmt.Errorf("starting the resource slice tracker: %w", err)
		}
		manager := dynamicresources.NewDRAManager(ctx, claimCache, tracker, factory)
		draManager = manager
		reg := claimCache.AddEventHandler(cache.ResourceEventHandlerFuncs{})
		draSynced = append(draSynced, reg.HasSynced, tracker.HasSynced)
		if gates.Enabled(features.DRAExtendedResource) {
			erCache := manager.DeviceClassResolver().(*extendedresourcecache.ExtendedResourceCache)
			r, err := factory.Resource().V1().DeviceClasses().Informer().AddEventHandler(erCache)
			if err != nil {
				return nil, err
			}
			draSynced = append(draSynced, r.HasSynced)
		}
	}
	profile, _, err := defaultProfile()
	if err != nil {
		return nil, err
	}
	f, err := frameworkruntime.NewFramework(ctx, registry, profile,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSharedDRAManager(draManager),
		frameworkruntime.WithSnapshotSharedLister(internalcache.NewEmptySnapshot()),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithPodGroupManager(schedulerCache),
		frameworkruntime.WithEventRecorder(&events.FakeRecorder{}),
		frameworkruntime.WithLogger(logger),
	)
	if err != nil {
		return nil, fmt.Errorf("NewFramework: %w", err)
	}
	defer func() { _ = f.Close() }()

	// As scheduler.New.
	preEnqueue := map[string]fwk.PreEnqueuePlugin{}
	for _, pl := range f.PreEnqueuePlugins() {
		preEnqueue[pl.Name()] = pl
	}
	hints, err := queueBuildQueueingHintMap(ctx, f.EnqueueExtensions())
	if err != nil {
		return nil, err
	}
	fakeClock := testingclock.NewFakeClock(time.Unix(1_800_000_000, 0))
	podLister := factory.Core().V1().Pods().Lister()
	// The informers the steps wait for (created before Start).
	stores := queueStores{
		pods: factory.Core().V1().Pods().Informer().GetStore(), nodes: factory.Core().V1().Nodes().Informer().GetStore(),
		slices: factory.Resource().V1().ResourceSlices().Informer().GetStore(), classes: factory.Resource().V1().DeviceClasses().Informer().GetStore(),
		pvs: factory.Core().V1().PersistentVolumes().Informer().GetStore(), pvcs: factory.Core().V1().PersistentVolumeClaims().Informer().GetStore(),
		scs: factory.Storage().V1().StorageClasses().Informer().GetStore(),
	}
	q := internalqueue.NewPriorityQueue(stableLess(f.QueueSortFunc()), factory,
		internalqueue.WithClock(fakeClock),
		internalqueue.WithPodInitialBackoffDuration(cfg.initialBackoff),
		internalqueue.WithPodMaxBackoffDuration(cfg.maxBackoff),
		internalqueue.WithPodLister(podLister),
		internalqueue.WithPodMaxInUnschedulablePodsDuration(cfg.maxUnschedulable),
		internalqueue.WithPreEnqueuePluginMap(map[string]map[string]fwk.PreEnqueuePlugin{profile.SchedulerName: preEnqueue}),
		internalqueue.WithQueueingHintMapPerProfile(internalqueue.QueueingHintMapPerProfile{profile.SchedulerName: hints}),
		internalqueue.WithMetricsRecorder(metrics.NewMetricsAsyncRecorder(1000, time.Second, ctx.Done())),
	)
	defer q.Close()
	if setter, ok := f.(interface {
		SetPodNominator(fwk.PodNominator)
		SetPodActivator(fwk.PodActivator)
	}); ok {
		setter.SetPodNominator(q)
		setter.SetPodActivator(q)
	}

	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), draSynced...) {
		return nil, errors.New("the DRA manager's caches did not sync")
	}

	r := &queueRun{ctx: ctx, logger: logger, client: client, stores: stores, cfg: cfg, claimCache: claimCache, queue: q, clock: fakeClock,
		popped: map[int]framework.QueuedEntityInfo{}, ended: map[int]bool{}}
	for _, pod := range pending {
		q.Add(ctx, pod)
		if gates.Enabled(features.GenericWorkload) {
			q.MoveAllToActiveOrBackoffQueue(logger, framework.EventUnscheduledPodAdd, nil, pod, nil)
		}
	}
	var states []*queueState
	for i, step := range seq.Steps {
		r.flushed, r.plugins = nil, nil
		popped, err := r.step(i, step)
		if err != nil {
			return nil, fmt.Errorf("step %d (%s): %w", i, step.Op, err)
		}
		st := r.state()
		st.Popped = popped
		st.Flushed = r.flushed
		st.Plugins = r.plugins
		states = append(states, st)
	}
	return states, nil
}

// queueBuildQueueingHintMap is scheduler.go's buildQueueingHintMap (unexported there).
func queueBuildQueueingHintMap(ctx context.Context, es []fwk.EnqueueExtensions) (internalqueue.QueueingHintMap, error) {
	defaultHint := func(_ klog.Logger, _ *v1.Pod, _, _ interface{}) (fwk.QueueingHint, error) { return fwk.Queue, nil }
	m := make(internalqueue.QueueingHintMap)
	var returnErr error
	for _, e := range es {
		evs, err := e.EventsToRegister(ctx)
		if err != nil {
			returnErr = errors.Join(returnErr, err)
		}
		for _, event := range evs {
			fn := event.QueueingHintFn
			if fn == nil {
				fn = defaultHint
			}
			h := &internalqueue.QueueingHintFunction{PluginName: e.Name(), QueueingHintFn: fn, PreQueueingHintFn: event.PreQueueingHintFn}
			if event.Event.Resource == fwk.Pod {
				for _, podEvent := range framework.UnrollPodEvent(event.Event) {
					m[podEvent] = append(m[podEvent], h)
				}
			} else {
				m[event.Event] = append(m[event.Event], h)
			}
		}
	}
	return m, returnErr
}

// current is the informer's copy of an object (nil when absent) and its resourceVersion.
func (r *queueRun) current(kind string, obj apiruntime.Object) (apiruntime.Object, error) {
	meta := obj.(metav1.Object)
	key := meta.GetName()
	if meta.GetNamespace() != "" {
		key = meta.GetNamespace() + "/" + key
	}
	if kind == "ResourceClaim" {
		got, err := r.claimCache.Get(key)
		if err != nil {
			return nil, nil //nolint:nilerr // absent
		}
		return got.(apiruntime.Object), nil
	}
	var store cache.Store
	f := r.stores
	switch kind {
	case "Pod":
		store = f.pods
	case "Node":
		store = f.nodes
	case "ResourceSlice":
		store = f.slices
	case "DeviceClass":
		store = f.classes
	case "PersistentVolume":
		store = f.pvs
	case "PersistentVolumeClaim":
		store = f.pvcs
	case "StorageClass":
		store = f.scs
	}
	got, exists, err := store.GetByKey(key)
	if err != nil || !exists {
		return nil, err
	}
	return got.(apiruntime.Object), nil
}

type queueStores struct{ pods, nodes, slices, classes, pvs, pvcs, scs cache.Store }

// waitFor waits until the informer (or the claims' assume cache) holds obj's resourceVersion
// (present) or nothing (absent).
func (r *queueRun) waitFor(kind string, obj apiruntime.Object, present bool) error {
	want := obj.(metav1.Object).GetResourceVersion()
	// Generous and polled with a growing pause: on a loaded machine (CI's, 2 cores, sequences run
	// in parallel) a tight 50 µs poll by every sequence starved the informers it waits for.
	deadline := time.Now().Add(60 * time.Second)
	pause := 50 * time.Microsecond
	for {
		got, err := r.current(kind, obj)
		if err != nil {
			return err
		}
		if present && got != nil && got.(metav1.Object).GetResourceVersion() == want {
			return nil
		}
		if !present && got == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the informer did not see %s %s (resourceVersion %q, present %v)", kind, obj.(metav1.Object).GetName(), want, present)
		}
		time.Sleep(pause)
		pause = min(2*pause, 5*time.Millisecond)
	}
}

func (r *queueRun) write(kind string, obj apiruntime.Object, del bool) error {
	ctx := r.ctx
	meta := obj.(metav1.Object)
	ns, name := meta.GetNamespace(), meta.GetName()
	var err error
	c := r.client
	switch o := obj.(type) {
	case *v1.Pod:
		if del {
			err = c.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
		} else if _, err = c.CoreV1().Pods(ns).Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.CoreV1().Pods(ns).Create(ctx, o, metav1.CreateOptions{})
		}
	case *v1.Node:
		if del {
			err = c.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		} else if _, err = c.CoreV1().Nodes().Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{})
		}
	case *resourceapi.ResourceClaim:
		if del {
			err = c.ResourceV1().ResourceClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
		} else if _, err = c.ResourceV1().ResourceClaims(ns).Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.ResourceV1().ResourceClaims(ns).Create(ctx, o, metav1.CreateOptions{})
		}
	case *resourceapi.ResourceSlice:
		if del {
			err = c.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{})
		} else if _, err = c.ResourceV1().ResourceSlices().Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.ResourceV1().ResourceSlices().Create(ctx, o, metav1.CreateOptions{})
		}
	case *resourceapi.DeviceClass:
		if del {
			err = c.ResourceV1().DeviceClasses().Delete(ctx, name, metav1.DeleteOptions{})
		} else if _, err = c.ResourceV1().DeviceClasses().Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.ResourceV1().DeviceClasses().Create(ctx, o, metav1.CreateOptions{})
		}
	case *v1.PersistentVolume:
		if del {
			err = c.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{})
		} else if _, err = c.CoreV1().PersistentVolumes().Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.CoreV1().PersistentVolumes().Create(ctx, o, metav1.CreateOptions{})
		}
	case *v1.PersistentVolumeClaim:
		if del {
			err = c.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, name, metav1.DeleteOptions{})
		} else if _, err = c.CoreV1().PersistentVolumeClaims(ns).Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.CoreV1().PersistentVolumeClaims(ns).Create(ctx, o, metav1.CreateOptions{})
		}
	case *storagev1.StorageClass:
		if del {
			err = c.StorageV1().StorageClasses().Delete(ctx, name, metav1.DeleteOptions{})
		} else if _, err = c.StorageV1().StorageClasses().Update(ctx, o, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = c.StorageV1().StorageClasses().Create(ctx, o, metav1.CreateOptions{})
		}
	default:
		return fmt.Errorf("cannot write %T", obj)
	}
	if err != nil {
		return err
	}
	return r.waitFor(kind, obj, !del)
}

var queueResources = map[string]fwk.EventResource{
	"ResourceClaim":         fwk.ResourceClaim,
	"ResourceSlice":         fwk.ResourceSlice,
	"DeviceClass":           fwk.DeviceClass,
	"PersistentVolume":      fwk.PersistentVolume,
	"PersistentVolumeClaim": fwk.PersistentVolumeClaim,
	"StorageClass":          fwk.StorageClass,
}

// step applies one step; for a pop, the name of the pod taken ("" when nothing was poppable).
func (r *queueRun) step(i int, s queueStep) (string, error) {
	q, logger := r.queue, r.logger
	switch s.Op {
	case "upsert", "delete":
		obj, err := decodeObject(s.Kind, s.Object)
		if err != nil {
			return "", err
		}
		old, err := r.current(s.Kind, obj)
		if err != nil {
			return "", err
		}
		if s.Op == "delete" && old == nil {
			return "", nil // nothing to delete
		}
		if s.Op == "delete" {
			obj = old
		} else if pod, ok := obj.(*v1.Pod); ok && old != nil {
			cur := old.(*v1.Pod)
			if pod.Spec.NodeName == "" {
				pod.Spec.NodeName = cur.Spec.NodeName
			}
			if pod.Status.NominatedNodeName == "" {
				pod.Status.NominatedNodeName = cur.Status.NominatedNodeName
			}
		}
		if err := r.write(s.Kind, obj, s.Op == "delete"); err != nil {
			return "", err
		}
		r.deliver(s.Kind, old, obj, s.Op == "delete")
		return "", nil
	case "pop":
		if len(q.PodsInActiveQ()) == 0 && len(r.poppableBackoff()) == 0 {
			r.popped[i] = nil
			return "", nil
		}
		entity, err := q.Pop(logger)
		if err != nil {
			return "", err
		}
		r.popped[i] = entity
		name := ""
		entity.ForEachPodInfo(func(p *framework.QueuedPodInfo) bool { name = p.Pod.Name; return false })
		return name, nil
	case "fail", "bind", "nominate":
		if s.Pop == nil {
			return "", errors.New("no pop index")
		}
		entity := r.popped[*s.Pop]
		if entity == nil || r.ended[*s.Pop] {
			return "", nil
		}
		pInfo, ok := entity.(*framework.QueuedPodInfo)
		if !ok {
			return "", fmt.Errorf("popped a %T", entity)
		}
		switch s.Op {
		case "fail":
			r.ended[*s.Pop] = true
			plugins := s.Plugins
			if s.ByPod {
				candidates := podRejections(pInfo.Pod)
				plugins = []string{candidates[s.Pick%len(candidates)]}
			}
			r.plugins = plugins
			return "", r.fail(pInfo, plugins)
		case "bind", "nominate":
			if s.Op == "bind" {
				r.ended[*s.Pop] = true
				q.Done(pInfo.Pod.UID)
			}
			old, err := r.current("Pod", pInfo.Pod)
			if err != nil || old == nil || old.(*v1.Pod).UID != pInfo.Pod.UID {
				return "", err // deleted meanwhile
			}
			pod := old.(*v1.Pod).DeepCopy()
			pod.ResourceVersion = s.RV
			if s.Op == "bind" {
				pod.Spec.NodeName = s.Node
			} else {
				pod.Status.NominatedNodeName = s.Nominated
				podInfo, _ := framework.NewPodInfo(pod)
				q.AddNominatedPod(logger, podInfo, &fwk.NominatingInfo{NominatedNodeName: s.Nominated, NominatingMode: fwk.ModeOverride})
			}
			if err := r.write("Pod", pod, false); err != nil {
				return "", err
			}
			r.deliver("Pod", old, pod, false)
		}
		return "", nil
	case "advance":
		r.clock.Step(time.Duration(s.Seconds * float64(time.Second)))
		r.flushUnschedulable()
		r.flushBackoff()
		return "", nil
	}
	return "", fmt.Errorf("unknown op %q", s.Op)
}

// podRejections are the plugins that may reject pod, from its spec as popped (the Python side's
// draxr_dev.queue_diff.casegen.pod_rejections is the same list).
func podRejections(pod *v1.Pod) []string {
	var out []string
	if len(pod.Spec.ResourceClaims) > 0 {
		out = append(out, "DynamicResources")
	}
	if pod.Spec.Affinity != nil && pod.Spec.Affinity.NodeAffinity != nil {
		out = append(out, "NodeAffinity")
	}
	if len(pod.Spec.Tolerations) > 0 {
		out = append(out, "TaintToleration")
	}
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, "VolumeBinding")
			break
		}
	}
	if len(pod.Spec.TopologySpreadConstraints) > 0 {
		out = append(out, "PodTopologySpread")
	}
	return append(out, "NodeResourcesFit")
}

// fail is handleSchedulingFailure for a FitError with the rejecting plugins (none: an error).
func (r *queueRun) fail(popped *framework.QueuedPodInfo, plugins []string) error {
	pInfo := popped.DeepCopy()
	pInfo.ClearRejectorPlugins()
	for _, p := range plugins {
		pInfo.UnschedulablePlugins.Insert(p)
	}
	cached, err := r.current("Pod", pInfo.Pod)
	if err != nil {
		return err
	}
	if cached == nil || cached.(*v1.Pod).Spec.NodeName != "" || cached.(*v1.Pod).UID != pInfo.Pod.UID {
		r.queue.Done(pInfo.Pod.UID)
		return nil
	}
	pInfo.PodInfo, _ = framework.NewPodInfo(cached.(*v1.Pod).DeepCopy())
	if err := r.queue.AddUnschedulablePodIfNotPresent(r.logger, pInfo, r.queue.SchedulingCycle()); err != nil {
		return err
	}
	return nil
}

// deliver is what eventhandlers.go does with an informer event of kind.
func (r *queueRun) deliver(kind string, old, obj apiruntime.Object, del bool) {
	q, logger, ctx := r.queue, r.logger, r.ctx
	switch kind {
	case "Pod":
		pod := obj.(*v1.Pod)
		if del {
			if pod.Spec.NodeName != "" {
				q.MoveAllToActiveOrBackoffQueue(logger, framework.EventAssignedPodDelete, pod, nil, nil)
				return
			}
			q.Delete(logger, pod)
			if pod.Status.NominatedNodeName != "" {
				q.MoveAllToActiveOrBackoffQueue(logger, framework.EventAssignedPodDelete, pod, nil, queueLEPriority(pod))
			}
			return
		}
		if old == nil {
			if pod.Spec.NodeName != "" {
				q.MoveAllToActiveOrBackoffQueue(logger, framework.EventAssignedPodAdd, nil, pod, nil)
				return
			}
			q.Add(ctx, pod)
			if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
				q.MoveAllToActiveOrBackoffQueue(logger, framework.EventUnscheduledPodAdd, nil, pod, nil)
			}
			return
		}
		oldPod := old.(*v1.Pod)
		switch {
		case oldPod.Spec.NodeName != "":
			for _, evt := range framework.PodSchedulingPropertiesChange(pod, oldPod, false) {
				q.MoveAllToActiveOrBackoffQueue(logger, evt, oldPod, pod, nil)
			}
		case pod.Spec.NodeName != "":
			q.MoveAllToActiveOrBackoffQueue(logger, framework.EventAssignedPodAdd, nil, pod, nil)
			q.Delete(logger, oldPod)
		default:
			if oldPod.ResourceVersion == pod.ResourceVersion {
				return
			}
			q.Update(ctx, oldPod, pod)
			if len(oldPod.Status.NominatedNodeName) > 0 && oldPod.Status.NominatedNodeName != pod.Status.NominatedNodeName {
				q.MoveAllToActiveOrBackoffQueue(logger, framework.EventAssignedPodDelete, oldPod, nil, queueLEPriority(oldPod))
			}
		}
	case "Node":
		node := obj.(*v1.Node)
		switch {
		case del:
			q.MoveAllToActiveOrBackoffQueue(logger, fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Delete}, node, nil, nil)
		case old == nil:
			q.MoveAllToActiveOrBackoffQueue(logger, fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}, nil, node, nil)
		default:
			for _, evt := range framework.NodeSchedulingPropertiesChange(node, old.(*v1.Node)) {
				q.MoveAllToActiveOrBackoffQueue(logger, evt, old, node, nil)
			}
		}
	default:
		res := queueResources[kind]
		switch {
		case del:
			q.MoveAllToActiveOrBackoffQueue(logger, fwk.ClusterEvent{Resource: res, ActionType: fwk.Delete}, obj, nil, nil)
		case old == nil:
			q.MoveAllToActiveOrBackoffQueue(logger, fwk.ClusterEvent{Resource: res, ActionType: fwk.Add}, nil, obj, nil)
		default:
			q.MoveAllToActiveOrBackoffQueue(logger, fwk.ClusterEvent{Resource: res, ActionType: fwk.Update}, old, obj, nil)
		}
	}
}

func queueLEPriority(pod *v1.Pod) internalqueue.PreEnqueueCheck {
	priority := corev1helpers.PodPriority(pod)
	return func(p *v1.Pod) bool { return corev1helpers.PodPriority(p) <= priority }
}

func (r *queueRun) queued(pod *v1.Pod) *framework.QueuedPodInfo {
	pInfo, _ := r.queue.GetPod(pod.Name, pod.Namespace, nil)
	return pInfo
}

func rejected(p *framework.QueuedPodInfo) bool {
	return p.UnschedulablePlugins.Len()+p.PendingPlugins.Len() > 0
}

func (r *queueRun) poppableBackoff() []*v1.Pod {
	var out []*v1.Pod
	for _, pod := range r.queue.PodsInBackoffQ() {
		if p := r.queued(pod); p != nil && rejected(p) {
			out = append(out, pod)
		}
	}
	return out
}

// flushUnschedulable is flushUnschedulableEntitiesLeftover through the exported API.
func (r *queueRun) flushUnschedulable() {
	now := r.clock.Now()
	due := map[types.UID]bool{}
	for _, pod := range r.queue.UnschedulablePods() {
		p := r.queued(pod)
		if p == nil {
			continue
		}
		last := p.Timestamp
		if p.FlushTimestamp.After(last) {
			last = p.FlushTimestamp
		}
		if now.Sub(last) > r.maxUnschedulable() {
			p.WasFlushedFromUnschedulable = true
			p.FlushTimestamp = now
			due[pod.UID] = true
			r.flushed = append(r.flushed, pod.Name)
		}
	}
	sort.Strings(r.flushed)
	if len(due) > 0 {
		r.queue.MoveAllToActiveOrBackoffQueue(r.logger, framework.EventUnschedulableTimeout, nil, nil, func(p *v1.Pod) bool { return due[p.UID] })
	}
}

// flushBackoff is flushBackoffQCompleted through the exported API: the backoffQ's pods whose
// backoff ended (backoffQueue.isEntityBackingoff, with its 1 s ordering window) to the activeQ.
func (r *queueRun) flushBackoff() {
	done := map[string]*v1.Pod{}
	aligned := r.clock.Now().Truncate(time.Second)
	for _, pod := range r.queue.PodsInBackoffQ() {
		p := r.queued(pod)
		if p == nil {
			continue
		}
		if r.backoffTime(p).Before(aligned) {
			done[pod.Name] = pod
		}
	}
	if len(done) > 0 {
		r.queue.Activate(r.logger, done)
	}
}

// backoffTime is backoffQueue.getBackoffTime (for a single pod).
func (r *queueRun) backoffTime(p *framework.QueuedPodInfo) time.Time {
	if !p.BackoffExpiration.IsZero() {
		return p.BackoffExpiration
	}
	count := p.UnschedulableCount
	if p.ConsecutiveErrorsCount > 0 {
		count = p.ConsecutiveErrorsCount
	}
	if count == 0 {
		return time.Time{}
	}
	initial, maxBackoff := r.cfg.initialBackoff, r.cfg.maxBackoff
	d := maxBackoff
	if shift := count - 1; initial <= maxBackoff>>shift {
		d = initial << shift
	}
	return p.Timestamp.Add(d).Truncate(time.Second)
}

func (r *queueRun) maxUnschedulable() time.Duration { return r.cfg.maxUnschedulable }

func names(pods []*v1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Name)
	}
	sort.Strings(out)
	return out
}

func (r *queueRun) state() *queueState {
	st := &queueState{
		Active:        names(r.queue.PodsInActiveQ()),
		Unschedulable: names(r.queue.UnschedulablePods()),
		InFlight:      names(r.queue.InFlightPods()),
		Backoff:       []string{},
		ErrorBackoff:  []string{},
	}
	for _, pod := range r.queue.PodsInBackoffQ() {
		if p := r.queued(pod); p != nil && rejected(p) {
			st.Backoff = append(st.Backoff, pod.Name)
		} else {
			st.ErrorBackoff = append(st.ErrorBackoff, pod.Name)
		}
	}
	sort.Strings(st.Backoff)
	sort.Strings(st.ErrorBackoff)
	return st
}

// stableLess is the profile's queue sort with ties broken by pod name. Upstream leaves pods of equal
// priority and enqueue time (pods moved in one batch, on the fake clock) in heap insertion order,
// which follows Go's map order, so one sequence popped different pods from run to run (and the
// in-flight settling re-run judged another attempt). By name is one of the orders upstream may
// take; the backoffQ breaks its ties with the same function.
func stableLess(less fwk.LessFunc) fwk.LessFunc {
	return func(a, b fwk.QueuedEntityInfo) bool {
		if less(a, b) {
			return true
		}
		if less(b, a) {
			return false
		}
		return entityName(a) < entityName(b)
	}
}

func entityName(e fwk.QueuedEntityInfo) string {
	if p, ok := e.(*framework.QueuedPodInfo); ok && p.Pod != nil {
		return p.Pod.Namespace + "/" + p.Pod.Name
	}
	return ""
}
