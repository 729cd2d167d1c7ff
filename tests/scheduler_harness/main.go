// Command scheduler-harness runs kube-scheduler's own filter and score plugins
// (k8s.io/kubernetes/pkg/scheduler, the exact module version in go.mod) on a batch of
// cases and reports what each plugin decides, so that draxr's Python re-implementation of
// kube-scheduler's filters and scores can be compared against it (tests/differential).
//
// Input on stdin: one JSON list of cases (or {"cases": [...]}); Kubernetes objects in their
// v1 JSON form:
//
//	{"name": "...", "tags": ["..."],            // tags (and "family") are ignored
//	 "nodes": [<v1 Node>],
//	 "pods": [<v1 Pod, spec.nodeName set>],      // existing pods
//	 "namespaces": [<v1 Namespace>],
//	 "services": [<v1 Service>],
//	 "replicationControllers": [<v1 ReplicationController>],
//	 "replicaSets": [<apps/v1 ReplicaSet>],
//	 "statefulSets": [<apps/v1 StatefulSet>],
//	 // optional, for volume cases:
//	 "persistentVolumes": [<v1 PersistentVolume>],
//	 "persistentVolumeClaims": [<v1 PersistentVolumeClaim>],
//	 "storageClasses": [<storage/v1 StorageClass>],
//	 "csiNodes": [<storage/v1 CSINode>],
//	 "csiDrivers": [<storage/v1 CSIDriver>],
//	 "csiStorageCapacities": [<storage/v1 CSIStorageCapacity>],
//	 "volumeAttachments": [<storage/v1 VolumeAttachment>],
//	 // optional, for DRA cases (resource.k8s.io/v1):
//	 "deviceClasses": [<DeviceClass>],
//	 "resourceSlices": [<ResourceSlice>],
//	 "resourceClaims": [<ResourceClaim>],
//	 "resourceClaimTemplates": [<ResourceClaimTemplate>],
//	 // optional, for preemption cases (preemption.go):
//	 "podDisruptionBudgets": [<policy/v1 PodDisruptionBudget>],
//	 "preempt": true,                            // run PostFilter when no node is feasible
//	 "draPreemption": true,                      // with the DRA preemption reference
//	                                             // (dra_preemption.go): victims' devices freed
//	 "pod": <v1 Pod to place>,
//	 // optional, for sequences (casegen_sequences): pods scheduled after "pod", one after
//	 // another; before each next pod, the previous one is assumed on its "assumeOn" node (the
//	 // scheduler cache's AssumePod, then RunReservePluginsReserve: DynamicResources' pending
//	 // allocations, VolumeBinding's assumed volumes) and the snapshot updated; "" or a missing
//	 // entry: not placed. A node the pod does not pass the filters on is an error of the case.
//	 "sequence": [<v1 Pod>],
//	 "assumeOn": ["<node for pod>", "<node for sequence[0]>", ...],
//	 // optional, for clusters of 100 nodes or more: also evaluate the pod the way
//	 // findNodesThatPassFilters searches with the profile's percentageOfNodesToScore (see
//	 // "partial" below)
//	 "partialScoring": true}
//
// Output on stdout: one JSON list with one result per case, in input order:
//
//	{"name": "...",
//	 "filter": {"<node>": null | {"plugin": "...", "code": "...", "reasons": ["..."]}},
//	 "scores": {"<score plugin>": {"<feasible node>": <normalised, unweighted score>}},
//	 "weights": {"<score plugin>": <weight>},
//	 "total": {"<feasible node>": <weighted sum>},
//	 "message": "...",                             // without a feasible node: the FailedScheduling
//	                                               // message (FitError.Error(), or a Filter's error)
//	 "scoreSkipped": ["<score plugin>"],           // PreScore returned Skip (0 on every node)
//	 "steps": [<result>],                          // for sequences: each pod of "sequence"
//	 "partial": <result>,                          // with "partialScoring": the search cut off
//	                                               // after numFeasibleNodesToFind feasible nodes
//	                                               // (only the nodes evaluated in "filter"; the
//	                                               // scores normalised over the nodes found)
//	 "preemption": {...}}                          // only with "preempt" and no feasible node:
//	                                               // see preemption.go
//
// or {"name": "...", "error": "..."} when the case is invalid or a plugin fails with an
// error (not a rejection): upstream then fails the whole scheduling attempt.
//
// What is run, per case, the way pkg/scheduler/schedule_one.go runs it:
//
//   - the framework: kube-scheduler's default profile (the v1 KubeSchedulerConfiguration
//     defaults converted to the internal config, exactly as scheduler.New does without a
//     config file: default plugins and plugin args, PodTopologySpread system-default
//     constraints, InterPodAffinity hardPodAffinityWeight=1, ...), the in-tree registry and
//     the default feature gates of this binary (-print-default-features,
//     -print-profile);
//   - a fake clientset and a SharedInformerFactory (scheduler.NewInformerFactory) holding
//     every object of the case, including the nodes and all pods, started and synced before
//     the pod is evaluated; the DRA manager, CSI manager and pod-group manager wired as
//     scheduler.New wires them, including the DeviceClass informer feeding the DRA manager's
//     extended-resource cache (addAllEventHandlers); the DRA manager's own caches (the claims'
//     assume cache and its allocated-devices handler, the slice tracker, that extended-resource
//     cache) have processed every object before the pod is evaluated;
//   - the snapshot is built by the scheduler's own cache (backend/cache: AddNode, AddPod,
//     UpdateSnapshot) from the nodes and the existing pods that the scheduler's pod informer
//     would hand it: pods with spec.nodeName set and a phase other than Succeeded/Failed
//     (its field selector), terminating pods included;
//   - RunPreFilterPlugins. A rejection (Unschedulable or UnschedulableAndUnresolvable) is
//     reported on every node as that status (plugin = the rejecting plugin, or "" when the
//     merged PreFilterResult is empty: upstream's status then names no plugin). A
//     PreFilterResult that narrows the nodes: every node outside it reports what
//     findNodesThatFitPod records for absent nodes, {"plugin": "", "code":
//     "UnschedulableAndUnresolvable", "reasons": ["node(s) didn't satisfy plugin(s) [P ...]"]}.
//     Any other status is an error of the case;
//   - RunFilterPluginsWithNominatedPods on each remaining node, the nominated pods being the
//     case's unbound, non-terminal pods with status.nominatedNodeName (the scheduling queue's
//     nominator holds those): null when it passes, else the first failing plugin, its status code
//     and reasons (a Filter plugin returning an error: code "Error", reasons [message]);
//   - RunPreScorePlugins and RunScorePlugins on the feasible nodes, even when there is only
//     one (upstream then skips scoring and takes it). scores[plugin][node] is the plugin's
//     score after NormalizeScore and before the weight (RunScorePlugins' weighted score
//     divided by the plugin's weight); a plugin whose PreScore returned Skip scores 0 on
//     every node. total[node] is the weighted sum RunScorePlugins returns.
//   - with "partialScoring": the same once more, the way findNodesThatPassFilters searches when
//     its parallelism is 1: the (PreFilter-narrowed) nodes in name order from index 0 (draxr's
//     order; upstream's snapshot lists them zone by zone and starts where the last cycle stopped,
//     and with 16 goroutines the nodes found first vary from run to run), stopping once
//     numFeasibleNodesToFind (schedule_one.go, copied below; the default profile's
//     percentageOfNodesToScore: unset, the global default 0, i.e. adaptive) nodes fit, then
//     scored over those nodes only.
//
// Pods are prepared the way kube-apiserver 1.37.2 stores them on create, so that cases can
// be written the way users write them: every pod (the incoming one and the existing ones)
// goes through the pod registry's PrepareForCreate (pkg/registry/core/pod, converted to the
// internal type and back), which merges pod (anti-)affinity matchLabelKeys and
// mismatchLabelKeys into the term's labelSelector (MatchLabelKeysInPodAffinity) and, with
// MatchLabelKeysInPodTopologySpreadSelectorMerge, topology spread matchLabelKeys into the
// constraint's labelSelector (the plugin merges them again itself: the same requirement
// twice selects the same pods). The merge appends `key In [value]` / `key NotIn [value]`
// requirements for keys the pod has as labels. The pod's status and generation are kept as
// given (PrepareForCreate would reset them). No v1 defaulting is applied: cases carry
// defaulted values themselves. A pod without a UID gets "uid-<namespace>-<name>" (the
// scheduler's cache is keyed by UID). -print-stored prints the prepared pods instead of
// scheduling, so that a Python emulation of the merge can be checked against this one.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	"k8s.io/kubernetes/pkg/features"
	podregistry "k8s.io/kubernetes/pkg/registry/core/pod"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/parallelize"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	plfeature "k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
)

type testCase struct {
	Name                   string                               `json:"name"`
	Family                 string                               `json:"family,omitempty"`
	Tags                   []string                             `json:"tags,omitempty"`
	Nodes                  []*v1.Node                           `json:"nodes"`
	Pods                   []*v1.Pod                            `json:"pods"`
	Namespaces             []*v1.Namespace                      `json:"namespaces"`
	Services               []*v1.Service                        `json:"services"`
	ReplicationControllers []*v1.ReplicationController          `json:"replicationControllers"`
	ReplicaSets            []*appsv1.ReplicaSet                 `json:"replicaSets"`
	StatefulSets           []*appsv1.StatefulSet                `json:"statefulSets"`
	PersistentVolumes      []*v1.PersistentVolume               `json:"persistentVolumes,omitempty"`
	PersistentVolumeClaims []*v1.PersistentVolumeClaim          `json:"persistentVolumeClaims,omitempty"`
	StorageClasses         []*storagev1.StorageClass            `json:"storageClasses,omitempty"`
	CSINodes               []*storagev1.CSINode                 `json:"csiNodes,omitempty"`
	CSIDrivers             []*storagev1.CSIDriver               `json:"csiDrivers,omitempty"`
	CSIStorageCapacities   []*storagev1.CSIStorageCapacity      `json:"csiStorageCapacities,omitempty"`
	VolumeAttachments      []*storagev1.VolumeAttachment        `json:"volumeAttachments,omitempty"`
	DeviceClasses          []*resourceapi.DeviceClass           `json:"deviceClasses,omitempty"`
	ResourceSlices         []*resourceapi.ResourceSlice         `json:"resourceSlices,omitempty"`
	ResourceClaims         []*resourceapi.ResourceClaim         `json:"resourceClaims,omitempty"`
	ResourceClaimTemplates []*resourceapi.ResourceClaimTemplate `json:"resourceClaimTemplates,omitempty"`
	// optional, for preemption cases (preemption.go):
	PodDisruptionBudgets []*policyv1.PodDisruptionBudget `json:"podDisruptionBudgets,omitempty"`
	Preempt              bool                            `json:"preempt,omitempty"`
	PreemptTimeOnly      bool                            `json:"preemptTimeOnly,omitempty"` // no self-check (bench)
	DRAPreemption        bool                            `json:"draPreemption,omitempty"`   // victims' devices freed (dra_preemption.go)
	Pod                  *v1.Pod                         `json:"pod"`
	// optional, for sequences: pods placed after Pod, one after another; AssumeOn names the
	// node each pod (Pod first) is assumed on before the next is scheduled ("": not placed).
	Sequence []*v1.Pod `json:"sequence,omitempty"`
	AssumeOn []string  `json:"assumeOn,omitempty"`
	// optional: also report the search cut off at numFeasibleNodesToFind ("partial").
	PartialScoring bool `json:"partialScoring,omitempty"`
	// optional (config.go): a KubeSchedulerConfiguration (JSON) and the profile to use from it.
	Config        json.RawMessage `json:"config,omitempty"`
	SchedulerName string          `json:"schedulerName,omitempty"`
}

type nodeStatus struct {
	Plugin  string   `json:"plugin"`
	Code    string   `json:"code"`
	Reasons []string `json:"reasons"`
}

type result struct {
	Name    string                      `json:"name"`
	Filter  map[string]*nodeStatus      `json:"filter"`
	Scores  map[string]map[string]int64 `json:"scores"`
	Weights map[string]int64            `json:"weights"`
	Total   map[string]int64            `json:"total"`
	// The FailedScheduling message when no node is feasible (FitError.Error(), or the error
	// of a Filter plugin that failed the attempt); "" when a node is.
	Message string `json:"message,omitempty"`
	// Score plugins whose PreScore returned Skip for the pod (they score 0 on every node).
	ScoreSkipped []string `json:"scoreSkipped,omitempty"`
	// For sequences: the result of each pod of "sequence", in order (Pod's is this one).
	Steps []*result `json:"steps,omitempty"`
	// Only for cases with "preempt": true where no node is feasible (preemption.go).
	Preemption *preemptionResult `json:"preemption,omitempty"`
	// Only for cases with "partialScoring": the search cut off at numFeasibleNodesToFind.
	Partial *result `json:"partial,omitempty"`
}

type failure struct {
	Name  string `json:"name"`
	Error string `json:"error"`
}

type storedPods struct {
	Name string    `json:"name"`
	Pod  *v1.Pod   `json:"pod"`
	Pods []*v1.Pod `json:"pods"`
}

// defaultProfile is what scheduler.New uses without a config file (applyDefaultProfile), and
// the configuration's global percentageOfNodesToScore.
func defaultProfile() (*schedulerapi.KubeSchedulerProfile, *int32, error) {
	var versionedCfg configv1.KubeSchedulerConfiguration
	scheme.Scheme.Default(&versionedCfg)
	cfg := schedulerapi.KubeSchedulerConfiguration{}
	if err := scheme.Scheme.Convert(&versionedCfg, &cfg, nil); err != nil {
		return nil, nil, err
	}
	if len(cfg.Profiles) != 1 {
		return nil, nil, fmt.Errorf("the default configuration has %d profiles, want 1", len(cfg.Profiles))
	}
	return &cfg.Profiles[0], cfg.PercentageOfNodesToScore, nil
}

// minFeasibleNodesToFind and minFeasibleNodesPercentageToFind: schedule_one.go's constants.
const (
	minFeasibleNodesToFind           = 100
	minFeasibleNodesPercentageToFind = 5
)

// numFeasibleNodesToFind is schedule_one.go's (*Scheduler).numFeasibleNodesToFind (unexported
// there), the profile's percentage first, then the global one.
func (r *runner) numFeasibleNodesToFind(numAllNodes int32) int32 {
	if numAllNodes < minFeasibleNodesToFind {
		return numAllNodes
	}
	var percentage int32
	if r.profile.PercentageOfNodesToScore != nil {
		percentage = *r.profile.PercentageOfNodesToScore
	} else if r.percentageOfNodesToScore != nil {
		percentage = *r.percentageOfNodesToScore
	}
	if percentage == 0 {
		percentage = int32(50) - numAllNodes/125
		if percentage < minFeasibleNodesPercentageToFind {
			percentage = minFeasibleNodesPercentageToFind
		}
	}
	numNodes := numAllNodes * percentage / 100
	if numNodes < minFeasibleNodesToFind {
		return minFeasibleNodesToFind
	}
	return numNodes
}

// prepareForCreate returns the pod as kube-apiserver would store it on create (see the
// package comment): PrepareForCreate on the internal type; status and generation kept.
func prepareForCreate(ctx context.Context, pod *v1.Pod) (*v1.Pod, error) {
	internal := &api.Pod{}
	if err := legacyscheme.Scheme.Convert(pod, internal, nil); err != nil {
		return nil, fmt.Errorf("converting pod %s/%s to the internal type: %w", pod.Namespace, pod.Name, err)
	}
	podregistry.Strategy.PrepareForCreate(ctx, internal)
	out := &v1.Pod{}
	if err := legacyscheme.Scheme.Convert(internal, out, nil); err != nil {
		return nil, fmt.Errorf("converting pod %s/%s back to v1: %w", pod.Namespace, pod.Name, err)
	}
	out.Status = *pod.Status.DeepCopy()
	out.Generation = pod.Generation
	out.TypeMeta = pod.TypeMeta
	if out.UID == "" {
		out.UID = types.UID(fmt.Sprintf("uid-%s-%s", out.Namespace, out.Name))
	}
	return out, nil
}

func preparePods(ctx context.Context, tc *testCase) (*v1.Pod, []*v1.Pod, error) {
	if tc.Pod == nil {
		return nil, nil, errors.New("pod is missing")
	}
	pod, err := prepareForCreate(ctx, tc.Pod)
	if err != nil {
		return nil, nil, err
	}
	pods := make([]*v1.Pod, 0, len(tc.Pods))
	for i, p := range tc.Pods {
		if p == nil {
			return nil, nil, fmt.Errorf("pods[%d] is null", i)
		}
		prepared, err := prepareForCreate(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		pods = append(pods, prepared)
	}
	return pod, pods, nil
}

type runner struct {
	registry frameworkruntime.Registry
	profile  *schedulerapi.KubeSchedulerProfile
	// the configuration's global percentageOfNodesToScore (the profile's overrides it)
	percentageOfNodesToScore *int32
	parallelism              int
	timeout                  time.Duration
}

func (r *runner) run(tc *testCase) (out any) {
	defer func() {
		if p := recover(); p != nil {
			out = failure{Name: tc.Name, Error: fmt.Sprintf("panic: %v\n%s", p, debug.Stack())}
		}
	}()
	rr, err := r.withCaseConfig(tc)
	if err != nil {
		return failure{Name: tc.Name, Error: err.Error()}
	}
	res, err := rr.evaluate(tc)
	if err != nil {
		return failure{Name: tc.Name, Error: err.Error()}
	}
	res.Name = tc.Name
	return res
}

func (r *runner) evaluate(tc *testCase) (*result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	logger := klog.FromContext(ctx).WithValues("case", tc.Name)
	ctx = klog.NewContext(ctx, logger)

	pod, pods, err := preparePods(ctx, tc)
	if err != nil {
		return nil, err
	}
	nodeNames := sets.New[string]()
	for i, node := range tc.Nodes {
		if node == nil || node.Name == "" {
			return nil, fmt.Errorf("nodes[%d] has no name", i)
		}
		if nodeNames.Has(node.Name) {
			return nil, fmt.Errorf("node %q appears twice", node.Name)
		}
		nodeNames.Insert(node.Name)
	}
	sequence := make([]*v1.Pod, 0, len(tc.Sequence))
	for i, p := range tc.Sequence {
		if p == nil {
			return nil, fmt.Errorf("sequence[%d] is null", i)
		}
		prepared, err := prepareForCreate(ctx, p)
		if err != nil {
			return nil, err
		}
		sequence = append(sequence, prepared)
	}
	if len(tc.AssumeOn) > 1+len(sequence) {
		return nil, fmt.Errorf("assumeOn has %d nodes for %d pods", len(tc.AssumeOn), 1+len(sequence))
	}
	podKeys := sets.New[string]()
	for _, p := range append(append([]*v1.Pod{pod}, pods...), sequence...) {
		key := p.Namespace + "/" + p.Name
		if p.Name == "" || p.Namespace == "" {
			return nil, fmt.Errorf("pod %q has no name or namespace", key)
		}
		if podKeys.Has(key) || podKeys.Has(string(p.UID)) {
			return nil, fmt.Errorf("pod %q (uid %s) appears twice", key, p.UID)
		}
		podKeys.Insert(key, string(p.UID))
	}

	objects := []apiruntime.Object{pod}
	for _, p := range sequence {
		objects = append(objects, p)
	}
	for _, n := range tc.Nodes {
		objects = append(objects, n)
	}
	for _, p := range pods {
		objects = append(objects, p)
	}
	for _, o := range tc.Namespaces {
		objects = append(objects, o)
	}
	for _, o := range tc.Services {
		objects = append(objects, o)
	}
	for _, o := range tc.ReplicationControllers {
		objects = append(objects, o)
	}
	for _, o := range tc.ReplicaSets {
		objects = append(objects, o)
	}
	for _, o := range tc.StatefulSets {
		objects = append(objects, o)
	}
	for _, o := range tc.PersistentVolumes {
		objects = append(objects, o)
	}
	for _, o := range tc.PersistentVolumeClaims {
		objects = append(objects, o)
	}
	for _, o := range tc.StorageClasses {
		objects = append(objects, o)
	}
	for _, o := range tc.CSINodes {
		objects = append(objects, o)
	}
	for _, o := range tc.CSIDrivers {
		objects = append(objects, o)
	}
	for _, o := range tc.CSIStorageCapacities {
		objects = append(objects, o)
	}
	for _, o := range tc.VolumeAttachments {
		objects = append(objects, o)
	}
	for _, o := range tc.DeviceClasses {
		objects = append(objects, o)
	}
	for _, o := range tc.ResourceSlices {
		objects = append(objects, o)
	}
	for _, o := range tc.ResourceClaims {
		objects = append(objects, o)
	}
	for _, o := range tc.ResourceClaimTemplates {
		objects = append(objects, o)
	}
	for _, o := range tc.PodDisruptionBudgets {
		objects = append(objects, o)
	}
	for i, o := range objects {
		if o == nil || reflectNil(o) {
			return nil, fmt.Errorf("object #%d of the case is null", i)
		}
	}
	client := fake.NewClientset(objects...)
	informerFactory := scheduler.NewInformerFactory(client, 0, nil)
	defer informerFactory.Shutdown()
	// Stop the informers (and every other goroutine started with ctx) before Shutdown.
	defer cancel()

	// The snapshot, built by the scheduler's cache as scheduleOne does (UpdateSnapshot).
	gates := utilfeature.DefaultFeatureGate
	schedulerCache := internalcache.New(ctx, nil, gates.Enabled(features.GenericWorkload), gates.Enabled(features.CompositePodGroup))
	for _, n := range tc.Nodes {
		schedulerCache.AddNode(logger, n)
	}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			// Not assigned, or filtered out by the scheduler's pod informer.
			continue
		}
		if err := schedulerCache.AddPod(logger, p); err != nil {
			return nil, fmt.Errorf("adding pod %s/%s to the cache: %w", p.Namespace, p.Name, err)
		}
	}
	snapshot := internalcache.NewEmptySnapshot()
	if err := schedulerCache.UpdateSnapshot(logger, snapshot); err != nil {
		return nil, fmt.Errorf("UpdateSnapshot: %w", err)
	}

	// As in scheduler.New.
	var draManager fwk.SharedDRAManager
	var draSynced []cache.InformerSynced // the DRA manager's caches, waited for below
	if gates.Enabled(features.DynamicResourceAllocation) {
		claimCache := assumecache.NewAssumeCache(logger, informerFactory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
		trackerOpts := resourceslicetracker.Options{
			EnableDeviceTaintRules:   gates.Enabled(features.DRADeviceTaintRules),
			EnableConsumableCapacity: gates.Enabled(features.DRAConsumableCapacity),
			SliceInformer:            informerFactory.Resource().V1().ResourceSlices(),
			KubeClient:               client,
		}
		if trackerOpts.EnableDeviceTaintRules {
			trackerOpts.TaintInformer = informerFactory.Resource().V1().DeviceTaintRules()
		}
		tracker, err := resourceslicetracker.StartTracker(ctx, trackerOpts)
		if err != nil {
			return nil, fmt.Errorf("starting the resource slice tracker: %w", err)
		}
		manager := dynamicresources.NewDRAManager(ctx, claimCache, tracker, informerFactory)
		draManager = manager
		// The claims' assume cache delivers to the manager's allocated-devices handler
		// synchronously; its informer registration is synced once every claim went through.
		claimsRegistration := claimCache.AddEventHandler(cache.ResourceEventHandlerFuncs{})
		draSynced = append(draSynced, claimsRegistration.HasSynced, tracker.HasSynced)
		if gates.Enabled(features.DRAExtendedResource) {
			// As addAllEventHandlers: the extended-resource cache is a DeviceClass handler.
			erCache := manager.DeviceClassResolver().(*extendedresourcecache.ExtendedResourceCache)
			reg, err := informerFactory.Resource().V1().DeviceClasses().Informer().AddEventHandler(erCache)
			if err != nil {
				return nil, fmt.Errorf("registering the extended resource cache: %w", err)
			}
			draSynced = append(draSynced, reg.HasSynced)
		}
	}
	csiManager := nodevolumelimits.NewCSIManager(informerFactory.Storage().V1().CSINodes().Lister())

	nominator, err := newCaseNominator(pod, pods)
	if err != nil {
		return nil, err
	}
	registry := r.registry
	var preemptionPlugin *defaultpreemption.DefaultPreemption
	if tc.Preempt {
		registry = capturingRegistry(r.registry, &preemptionPlugin)
	}
	if tc.DRAPreemption {
		if draManager == nil {
			return nil, errors.New("draPreemption: the DynamicResourceAllocation feature is off")
		}
		registry = draReferenceRegistry(registry, draManager)
	}
	schedFramework, err := frameworkruntime.NewFramework(ctx, registry, r.profile.DeepCopy(),
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informerFactory),
		frameworkruntime.WithSharedDRAManager(draManager),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithMutableSnapshotLister(snapshot),
		frameworkruntime.WithParallelism(r.parallelism),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
		frameworkruntime.WithSharedCSIManager(csiManager),
		frameworkruntime.WithPodGroupManager(schedulerCache),
		frameworkruntime.WithPodNominator(nominator),
		frameworkruntime.WithPodActivator(nominator),
		frameworkruntime.WithEventRecorder(&events.FakeRecorder{}),
		frameworkruntime.WithLogger(logger),
	)
	if err != nil {
		return nil, fmt.Errorf("NewFramework: %w", err)
	}
	defer func() { _ = schedFramework.Close() }()

	informerFactory.Start(ctx.Done())
	synced := informerFactory.WaitForCacheSyncWithContext(ctx)
	for typ, ok := range synced.Synced {
		if !ok {
			return nil, fmt.Errorf("informer for %v did not sync", typ)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), draSynced...) {
		return nil, errors.New("the DRA manager's caches did not sync")
	}

	res, cyc, err := schedule(ctx, schedFramework, snapshot, pod, nil)
	if err != nil {
		return nil, err
	}
	if tc.PartialScoring {
		res.Partial, _, err = schedule(ctx, schedFramework, snapshot, pod, r.numFeasibleNodesToFind)
		if err != nil {
			return nil, fmt.Errorf("partial: %w", err)
		}
	}
	// A sequence: each pod assumed on its node (as assumeAndReserve: the scheduler's cache, then
	// the Reserve plugins: DynamicResources' pending allocations, VolumeBinding's assumed
	// volumes), the snapshot updated, then the next pod.
	current, currentCycle := pod, cyc
	for i, next := range append(sequence, nil) {
		if i < len(tc.AssumeOn) && tc.AssumeOn[i] != "" {
			node := tc.AssumeOn[i]
			if status, ok := lastResult(res).Filter[node]; !ok || status != nil {
				return nil, fmt.Errorf("step %d: assumeOn %q: not a feasible node", i, node)
			}
			assumed := current.DeepCopy()
			assumed.Spec.NodeName = node
			if err := schedulerCache.AssumePod(logger, assumed); err != nil {
				return nil, fmt.Errorf("step %d: AssumePod: %w", i, err)
			}
			if s := schedFramework.RunReservePluginsReserve(ctx, currentCycle.state, assumed, node); !s.IsSuccess() {
				return nil, fmt.Errorf("step %d: Reserve on %q: %w", i, node, s.AsError())
			}
			if err := schedulerCache.UpdateSnapshot(logger, snapshot); err != nil {
				return nil, fmt.Errorf("step %d: UpdateSnapshot: %w", i, err)
			}
		}
		if next == nil {
			break
		}
		step, stepCycle, err := schedule(ctx, schedFramework, snapshot, next, nil)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", i+1, err)
		}
		res.Steps = append(res.Steps, step)
		current, currentCycle = next, stepCycle
	}
	if tc.Preempt && cyc.feasible == 0 {
		if tc.DRAPreemption {
			cyc.diagnosis = candidateDiagnosis(cyc.diagnosis)
		}
		res.Preemption, err = runPreemption(ctx, schedFramework, preemptionPlugin, cyc, pod, pods, tc.PodDisruptionBudgets, tc.PreemptTimeOnly)
		if err != nil {
			return nil, fmt.Errorf("preemption: %w", err)
		}
	}
	return res, nil
}

// lastResult is the result of the sequence's last pod so far (the case's pod without steps).
func lastResult(res *result) *result {
	if len(res.Steps) == 0 {
		return res
	}
	return res.Steps[len(res.Steps)-1]
}

// fitMessage is the FailedScheduling message of a cycle without a feasible node: the error of
// the first node whose Filter failed with one (schedulePod fails the attempt), else FitError's.
func fitMessage(pod *v1.Pod, res *result, cyc *cycle, allNodes []fwk.NodeInfo) string {
	for _, n := range allNodes {
		if s := res.Filter[n.Node().Name]; s != nil && s.Code == fwk.Error.String() {
			return s.Reasons[0]
		}
	}
	fitError := &framework.FitError{Pod: pod, NumAllNodes: cyc.numAllNodes, Diagnosis: framework.Diagnosis{NodeToStatus: cyc.diagnosis, PreFilterMsg: cyc.preFilterMsg}}
	return fitError.Error()
}

// reflectNil: a JSON null in a list decodes to a typed nil pointer.
func reflectNil(o apiruntime.Object) bool {
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func statusOf(s *fwk.Status) *nodeStatus {
	reasons := s.Reasons()
	if reasons == nil {
		reasons = []string{}
	}
	if s.Code() == fwk.Error && len(reasons) == 0 && s.AsError() != nil {
		reasons = []string{s.AsError().Error()}
	}
	return &nodeStatus{Plugin: s.Plugin(), Code: s.Code().String(), Reasons: reasons}
}

// schedule mirrors schedulePod / findNodesThatFitPod / prioritizeNodes (schedule_one.go),
// recording every node's filter outcome and every plugin's score. With toFind (the partial
// search, see the package comment): the nodes in name order, the search stopped once
// toFind(number of nodes after PreFilter) of them fit.
func schedule(ctx context.Context, f framework.Framework, snapshot *internalcache.Snapshot, pod *v1.Pod, toFind func(int32) int32) (*result, *cycle, error) {
	allNodes, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, nil, err
	}
	res := &result{
		Filter:  make(map[string]*nodeStatus, len(allNodes)),
		Scores:  map[string]map[string]int64{},
		Weights: map[string]int64{},
		Total:   map[string]int64{},
	}
	for _, p := range f.ListPlugins().Score.Enabled {
		res.Weights[p.Name] = int64(p.Weight)
		res.Scores[p.Name] = map[string]int64{}
	}

	state := framework.NewCycleState()
	// The diagnosis findNodesThatFitPod builds, for PostFilter.
	cyc := &cycle{state: state, diagnosis: framework.NewDefaultNodeToStatus(), numAllNodes: len(allNodes)}
	preRes, s, unscheduledPlugins := f.RunPreFilterPlugins(ctx, state, pod)
	if !s.IsSuccess() {
		if !s.IsRejected() {
			return nil, nil, fmt.Errorf("PreFilter: %w", s.AsError())
		}
		for _, n := range allNodes {
			res.Filter[n.Node().Name] = statusOf(s)
		}
		cyc.diagnosis.SetAbsentNodesStatus(s)
		cyc.preFilterMsg = s.Message()
		res.Message = fitMessage(pod, res, cyc, allNodes)
		return res, cyc, nil
	}
	nodes := allNodes
	if !preRes.AllNodes() {
		absent := fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node(s) didn't satisfy plugin(s) %v", sets.List(unscheduledPlugins)))
		nodes = nil
		cyc.diagnosis.SetAbsentNodesStatus(absent)
		for _, n := range allNodes {
			if preRes.NodeNames.Has(n.Node().Name) {
				nodes = append(nodes, n)
			} else {
				res.Filter[n.Node().Name] = statusOf(absent)
			}
		}
	}
	limit := len(nodes)
	if toFind != nil {
		nodes = slices.Clone(nodes)
		slices.SortFunc(nodes, func(a, b fwk.NodeInfo) int { return strings.Compare(a.Node().Name, b.Node().Name) })
		limit = int(toFind(int32(len(nodes))))
	}
	var feasible []fwk.NodeInfo
	for _, n := range nodes {
		if len(feasible) >= limit {
			break
		}
		status := f.RunFilterPluginsWithNominatedPods(ctx, state, pod, n)
		if status.IsSuccess() {
			res.Filter[n.Node().Name] = nil
			feasible = append(feasible, n)
			continue
		}
		if status.Code() == fwk.Error {
			// schedulePod fails the attempt (no PostFilter); reported as the node's status.
			cyc.feasible = -1
		}
		res.Filter[n.Node().Name] = statusOf(status)
		cyc.diagnosis.Set(n.Node().Name, status)
	}
	if len(feasible) == 0 {
		res.Message = fitMessage(pod, res, cyc, allNodes)
		return res, cyc, nil
	}
	cyc.feasible = len(feasible)
	// Upstream returns the only feasible node without scoring; scores are computed anyway.
	if s := f.RunPreScorePlugins(ctx, state, pod, feasible); !s.IsSuccess() {
		return nil, nil, fmt.Errorf("PreScore: %w", s.AsError())
	}
	res.ScoreSkipped = sets.List(state.GetSkipScorePlugins())
	nodeScores, s := f.RunScorePlugins(ctx, state, pod, feasible)
	if !s.IsSuccess() {
		return nil, nil, fmt.Errorf("Score: %w", s.AsError())
	}
	for plugin := range res.Scores {
		for _, n := range feasible {
			res.Scores[plugin][n.Node().Name] = 0
		}
	}
	for _, ns := range nodeScores {
		res.Total[ns.Name] = ns.TotalScore
		for _, ps := range ns.Scores {
			weight := res.Weights[ps.Name]
			if weight == 0 {
				return nil, nil, fmt.Errorf("score plugin %q has no weight", ps.Name)
			}
			if ps.Score%weight != 0 {
				return nil, nil, fmt.Errorf("score plugin %q: weighted score %d is not a multiple of its weight %d", ps.Name, ps.Score, weight)
			}
			if _, ok := res.Scores[ps.Name]; !ok {
				res.Scores[ps.Name] = map[string]int64{}
			}
			res.Scores[ps.Name][ns.Name] = ps.Score / weight
		}
	}
	return res, cyc, nil
}

func readCases(in io.Reader) ([]*testCase, error) {
	data, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		var wrapper struct {
			Cases json.RawMessage `json:"cases"`
		}
		if err := json.Unmarshal(data, &wrapper); err != nil {
			return nil, err
		}
		data = wrapper.Cases
	}
	var cases []*testCase
	dec := json.NewDecoder(bytes.NewReader(data))
	// Unknown top-level fields are most likely typos in the case generator.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cases); err != nil {
		return nil, err
	}
	return cases, nil
}

func featureReport() map[string]any {
	gate := utilfeature.DefaultMutableFeatureGate
	all := map[string]bool{}
	for name := range gate.GetAll() {
		all[string(name)] = gate.Enabled(name)
	}
	return map[string]any{
		"emulationVersion":        gate.EmulationVersion().String(),
		"minCompatibilityVersion": gate.MinCompatibilityVersion().String(),
		// What the in-tree plugins are given (plugins/feature.Features).
		"schedulerFeatures": plfeature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate),
		"featureGates":      all,
	}
}

type pluginEntry struct {
	Name   string `json:"name"`
	Weight int32  `json:"weight,omitempty"`
}

func profileReport(r *runner) (map[string]any, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	informerFactory := scheduler.NewInformerFactory(client, 0, nil)
	defer informerFactory.Shutdown()
	defer cancel()
	snapshot := internalcache.NewEmptySnapshot()
	f, err := frameworkruntime.NewFramework(ctx, r.registry, r.profile.DeepCopy(),
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informerFactory),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithMutableSnapshotLister(snapshot),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(informerFactory.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithPodGroupManager(internalcache.New(ctx, nil, false, false)),
	)
	if err != nil {
		return nil, err
	}
	list := f.ListPlugins()
	points := map[string][]pluginEntry{}
	add := func(point string, set *schedulerapi.PluginSet) {
		for _, p := range set.Enabled {
			points[point] = append(points[point], pluginEntry{Name: p.Name, Weight: p.Weight})
		}
	}
	add("preEnqueue", &list.PreEnqueue)
	add("queueSort", &list.QueueSort)
	add("preFilter", &list.PreFilter)
	add("filter", &list.Filter)
	add("postFilter", &list.PostFilter)
	add("preScore", &list.PreScore)
	add("score", &list.Score)
	add("reserve", &list.Reserve)
	add("permit", &list.Permit)
	add("preBind", &list.PreBind)
	add("bind", &list.Bind)
	add("postBind", &list.PostBind)
	args := map[string]any{}
	for _, pc := range r.profile.PluginConfig {
		args[pc.Name] = pc.Args
	}
	multiPoint := []pluginEntry{}
	for _, p := range r.profile.Plugins.MultiPoint.Enabled {
		multiPoint = append(multiPoint, pluginEntry{Name: p.Name, Weight: p.Weight})
	}
	return map[string]any{
		"schedulerName": r.profile.SchedulerName,
		// nil: unset (the global one applies); the global default is 0 (adaptive)
		"percentageOfNodesToScore":       r.profile.PercentageOfNodesToScore,
		"globalPercentageOfNodesToScore": r.percentageOfNodesToScore,
		"multiPoint":                     multiPoint,
		"plugins":                        points,
		"pluginArgs":                     args,
	}, nil
}

func writeJSON(v any) {
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(os.Stderr, "scheduler-harness: writing output: %v\n", err)
		os.Exit(2)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "scheduler-harness: writing output: %v\n", err)
		os.Exit(2)
	}
}

func main() {
	klog.InitFlags(nil)
	printFeatures := flag.Bool("print-default-features", false, "print the feature gates (and the plugins' feature struct) as JSON and exit")
	printProfile := flag.Bool("print-profile", false, "print the default profile's plugins per extension point, with score weights, and the plugin args as JSON and exit")
	printStored := flag.Bool("print-stored", false, "print each case's pods as prepared for scheduling (kube-apiserver's create path) instead of scheduling")
	parallel := flag.Int("parallel", runtime.GOMAXPROCS(0)*4, "cases evaluated concurrently (each has its own fake clientset, informers and framework)")
	pluginParallelism := flag.Int("plugin-parallelism", parallelize.DefaultParallelism, "the framework's parallelism (kube-scheduler's default is 16)")
	timeout := flag.Duration("timeout", 60*time.Second, "per-case timeout")
	configFile := flag.String("config", "", "a KubeSchedulerConfiguration file: the runner uses its profile -scheduler-name (config.go)")
	schedulerName := flag.String("scheduler-name", "default-scheduler", "with -config: the profile to use")
	checkConfigFile := flag.String("check-config", "", "print {\"errors\": [...]} for this KubeSchedulerConfiguration file (config.go) and exit")
	checkConfigList := flag.Bool("check-configs", false, "read a JSON list of {\"config\", \"schedulerName\"} on stdin; print each one's errors and profile (config.go) and exit")
	flag.Parse()

	metrics.Register()
	profile, percentage, err := defaultProfile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "scheduler-harness: default profile: %v\n", err)
		os.Exit(2)
	}
	r := &runner{
		registry:                 frameworkplugins.NewInTreeRegistry(),
		profile:                  profile,
		percentageOfNodesToScore: percentage,
		parallelism:              *pluginParallelism,
		timeout:                  *timeout,
	}

	if *configFile != "" {
		data, err := os.ReadFile(*configFile)
		if err == nil {
			r.profile, r.percentageOfNodesToScore, err = profileFromConfig(data, *schedulerName)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "scheduler-harness: -config: %v\n", err)
			os.Exit(2)
		}
	}

	switch {
	case *checkConfigList:
		out, err := checkConfigs(r, bufio.NewReader(os.Stdin))
		if err != nil {
			fmt.Fprintf(os.Stderr, "scheduler-harness: -check-configs: %v\n", err)
			os.Exit(2)
		}
		writeJSON(out)
		return
	case *checkConfigFile != "":
		data, err := os.ReadFile(*checkConfigFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "scheduler-harness: %v\n", err)
			os.Exit(2)
		}
		writeJSON(map[string]any{"errors": checkConfig(r, data)})
		return
	case *printFeatures:
		writeJSON(featureReport())
		return
	case *printProfile:
		report, err := profileReport(r)
		if err != nil {
			fmt.Fprintf(os.Stderr, "scheduler-harness: %v\n", err)
			os.Exit(2)
		}
		writeJSON(report)
		return
	}

	cases, err := readCases(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintf(os.Stderr, "scheduler-harness: reading cases: %v\n", err)
		os.Exit(2)
	}

	if *printStored {
		out := make([]any, len(cases))
		for i, tc := range cases {
			pod, pods, err := preparePods(context.Background(), tc)
			if err != nil {
				out[i] = failure{Name: tc.Name, Error: err.Error()}
				continue
			}
			out[i] = storedPods{Name: tc.Name, Pod: pod, Pods: pods}
		}
		writeJSON(out)
		return
	}

	outcomes := make([]any, len(cases))
	work := make(chan int)
	var wg sync.WaitGroup
	workers := max(1, *parallel)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				outcomes[i] = r.run(cases[i])
			}
		}()
	}
	for i := range cases {
		work <- i
	}
	close(work)
	wg.Wait()
	writeJSON(outcomes)
}
