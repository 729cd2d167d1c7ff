// The DRA preemption reference, for cases with "draPreemption": true (casegen_preemption's device
// family): what DefaultPreemption decides when its dry run frees the victims' devices, so that
// draxr's DRA-aware core.preemption has something to be compared with. kube-scheduler 1.37.2 has
// no such reference: DynamicResources' PreFilterExtensions() returns nil, so in its dry run a
// victim's devices stay allocated (KEP-5690, "DRA: preemption", is not merged).
//
// Upstream's own code, unchanged: the whole framework and DefaultPreemption (SelectVictimsOnNode
// with its RemovePod/AddPod calls, DryRunPreemption, the candidate count and offset,
// pickOneNodeForPreemption, the PDBs, every message); DynamicResources' PreFilter, Filter,
// PostFilter and Score (k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources), and
// the structured allocator its Filter runs (k8s.io/dynamic-resource-allocation/structured, built
// by its PreFilter from the DRA manager's allocated state, as in every cycle).
//
// The harness's reference (this file), KEP-5690's design extended to KEP-5004 special claims:
//
//   - draReference replaces DynamicResources in the case's registry, under the same name: it is
//     upstream's plugin (built by upstream's factory and embedded, so every other extension point
//     is upstream's method), its PreFilter upstream's after setting up the reference's cycle state,
//     its Filter upstream's on the state described below, and PreFilterExtensions returning itself;
//   - RemovePod/AddPod record in the cycle state (cloned per node by the dry run, as every
//     plugin's) which pods the simulation removed. The claims that frees: each removed pod's
//     special claim (the claim named in status.extendedResourceClaimStatus), and each claim of its
//     spec.resourceClaims (named as upstream names them, resourceclaim.Name) whose status.reservedFor
//     holds only removed pods; a claim also reserved for a pod that stays, or for a non-pod
//     consumer, stays allocated (KEP-5690's rule). AddPod of a pod that was not removed (a
//     nominated pod) frees and takes nothing;
//   - Filter: with nothing freed, upstream's Filter on the cycle's state as it is. Otherwise
//     upstream's PreFilter runs again for the pod on a scratch cycle state, against a DRA manager
//     whose allocated state (GatherAllocatedState / ListAllAllocatedDevices) lacks the freed
//     claims' devices (dedicated device IDs; with DRAConsumableCapacity, shared device IDs and
//     consumed capacity; admin-access results are never counted as allocated, as upstream's
//     allocatedDevices counts them), then upstream's Filter on that state: upstream's allocator
//     decides whether the pod fits with those devices free. Scratch states are kept per set of
//     freed claims (the world does not change during a case);
//   - candidates: upstream's DynamicResources rejects a node where the allocator finds no fit with
//     UnschedulableAndUnresolvable ("cannot allocate all claims"), which DefaultPreemption never
//     tries. The diagnosis handed to PostFilter (and to the harness's own dry run) has those nodes
//     Unschedulable instead, so that they are candidates (freed devices may let the pod fit); the
//     reported "filter" keeps upstream's codes.
package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// cannotAllocate is DynamicResources' reason when the allocator finds no fit on a node.
const cannotAllocate = "cannot allocate all claims"

const removedKey fwk.StateKey = "draxr.test/DRAPreemptionReference"

// removedPods: the pods the dry run removed (RemovePod) and has not put back (AddPod).
type removedPods struct {
	pods map[types.UID]*v1.Pod
}

func (r *removedPods) Clone() fwk.StateData {
	c := &removedPods{pods: make(map[types.UID]*v1.Pod, len(r.pods))}
	for uid, p := range r.pods {
		c.pods[uid] = p
	}
	return c
}

// freeingDRAManager: the case's DRA manager, whose allocated state lacks the devices of `freed`
// while the reference's PreFilter runs (the PreFilter calls are serialized by mu).
type freeingDRAManager struct {
	fwk.SharedDRAManager
	mu    sync.Mutex
	freed atomic.Pointer[[]*resourceapi.ResourceClaim]
}

func (m *freeingDRAManager) ResourceClaims() fwk.ResourceClaimTracker {
	c := &freeingClaims{ResourceClaimTracker: m.SharedDRAManager.ResourceClaims()}
	if freed := m.freed.Load(); freed != nil {
		c.freed = *freed
	}
	return c
}

type freeingClaims struct {
	fwk.ResourceClaimTracker
	freed []*resourceapi.ResourceClaim
}

// forEachFreedDevice: the freed claims' devices as upstream's allocatedDevices counts them
// (foreachAllocatedDevice): admin access skipped; a shared device (consumable capacity) by its
// shared ID and consumed capacity, else its device ID.
func (c *freeingClaims) forEachFreedDevice(consumable bool, device func(structured.DeviceID), shared func(structured.SharedDeviceID, *resourceapi.DeviceRequestAllocationResult)) {
	for _, claim := range c.freed {
		if claim.Status.Allocation == nil {
			continue
		}
		for i := range claim.Status.Allocation.Devices.Results {
			result := &claim.Status.Allocation.Devices.Results[i]
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if consumable && result.ShareID != nil {
				shared(structured.MakeSharedDeviceID(id, result.ShareID), result)
				continue
			}
			device(id)
		}
	}
}

func (c *freeingClaims) ListAllAllocatedDevices() (sets.Set[structured.DeviceID], error) {
	allocated, err := c.ResourceClaimTracker.ListAllAllocatedDevices()
	if err != nil || allocated == nil {
		return allocated, err
	}
	c.forEachFreedDevice(false, func(id structured.DeviceID) { allocated.Delete(id) }, nil)
	return allocated, nil
}

func (c *freeingClaims) GatherAllocatedState() (*structured.AllocatedState, error) {
	state, err := c.ResourceClaimTracker.GatherAllocatedState()
	if err != nil || state == nil {
		return state, err
	}
	consumable := utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity)
	c.forEachFreedDevice(consumable,
		func(id structured.DeviceID) { state.AllocatedDevices.Delete(id) },
		func(id structured.SharedDeviceID, result *resourceapi.DeviceRequestAllocationResult) {
			state.AllocatedSharedDeviceIDs.Delete(id)
			if result.ConsumedCapacity != nil {
				deviceID := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
				state.AggregatedCapacity.Remove(structured.NewDeviceConsumedCapacity(deviceID, result.ConsumedCapacity))
			}
		})
	return state, nil
}

// draHandle: the framework's handle, but for the DRA manager upstream's plugin is given.
type draHandle struct {
	fwk.Handle
	manager *freeingDRAManager
}

func (h *draHandle) SharedDRAManager() fwk.SharedDRAManager { return h.manager }

type scratch struct {
	state  fwk.CycleState
	status *fwk.Status
}

// draReference: upstream's DynamicResources with KEP-5690's RemovePod/AddPod (see the file comment).
type draReference struct {
	*dynamicresources.DynamicResources
	manager *freeingDRAManager

	mu       sync.Mutex
	scratchs map[string]*scratch
}

var _ fwk.PreFilterExtensions = &draReference{}

// draReferenceRegistry: the registry with DynamicResources replaced by the reference.
func draReferenceRegistry(registry frameworkruntime.Registry, manager fwk.SharedDRAManager) frameworkruntime.Registry {
	copied := make(frameworkruntime.Registry, len(registry))
	for name, factory := range registry {
		copied[name] = factory
	}
	inner := registry[dynamicresources.Name]
	copied[dynamicresources.Name] = func(ctx context.Context, args apiruntime.Object, h fwk.Handle) (fwk.Plugin, error) {
		freeing := &freeingDRAManager{SharedDRAManager: manager}
		p, err := inner(ctx, args, &draHandle{Handle: h, manager: freeing})
		if err != nil {
			return nil, err
		}
		pl, ok := p.(*dynamicresources.DynamicResources)
		if !ok {
			return nil, fmt.Errorf("DynamicResources' factory built a %T", p)
		}
		return &draReference{DynamicResources: pl, manager: freeing, scratchs: map[string]*scratch{}}, nil
	}
	return copied
}

func (pl *draReference) PreFilter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodes []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	cs.Write(removedKey, &removedPods{pods: map[types.UID]*v1.Pod{}})
	pl.manager.mu.Lock()
	defer pl.manager.mu.Unlock()
	pl.manager.freed.Store(nil)
	return pl.DynamicResources.PreFilter(ctx, cs, pod, nodes)
}

func (pl *draReference) PreFilterExtensions() fwk.PreFilterExtensions { return pl }

func removedOf(cs fwk.CycleState) (*removedPods, error) {
	data, err := cs.Read(removedKey)
	if err != nil {
		return nil, err
	}
	r, ok := data.(*removedPods)
	if !ok {
		return nil, fmt.Errorf("%s holds a %T", removedKey, data)
	}
	return r, nil
}

func (pl *draReference) RemovePod(_ context.Context, cs fwk.CycleState, _ *v1.Pod, podInfoToRemove fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	r, err := removedOf(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	p := podInfoToRemove.GetPod()
	r.pods[p.UID] = p
	return nil
}

func (pl *draReference) AddPod(_ context.Context, cs fwk.CycleState, _ *v1.Pod, podInfoToAdd fwk.PodInfo, _ fwk.NodeInfo) *fwk.Status {
	r, err := removedOf(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	delete(r.pods, podInfoToAdd.GetPod().UID)
	return nil
}

// freedClaims: the allocated claims the removal of r's pods frees, in UID order.
func (pl *draReference) freedClaims(r *removedPods) []*resourceapi.ResourceClaim {
	claims := pl.manager.SharedDRAManager.ResourceClaims()
	freed := map[types.UID]*resourceapi.ResourceClaim{}
	// An allocated claim, or nil (the tracker's Get fails only for a claim it does not hold: a
	// victim's missing claim frees nothing).
	get := func(namespace, name string) *resourceapi.ResourceClaim {
		claim, err := claims.Get(namespace, name)
		if err != nil || claim.Status.Allocation == nil {
			return nil
		}
		return claim
	}
	for _, pod := range r.pods {
		if ercs := pod.Status.ExtendedResourceClaimStatus; ercs != nil && ercs.ResourceClaimName != "" {
			if claim := get(pod.Namespace, ercs.ResourceClaimName); claim != nil {
				freed[claim.UID] = claim
			}
		}
		for i := range pod.Spec.ResourceClaims {
			name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
			if err != nil || name == nil {
				continue // upstream's PreFilter would have refused such a pod: no claim to free
			}
			claim := get(pod.Namespace, *name)
			if claim == nil || len(claim.Status.ReservedFor) == 0 {
				continue
			}
			onlyRemoved := true
			for _, ref := range claim.Status.ReservedFor {
				if ref.APIGroup != "" || ref.Resource != "pods" || r.pods[ref.UID] == nil {
					onlyRemoved = false
					break
				}
			}
			if onlyRemoved {
				freed[claim.UID] = claim
			}
		}
	}
	out := make([]*resourceapi.ResourceClaim, 0, len(freed))
	for _, claim := range freed {
		out = append(out, claim)
	}
	slices.SortFunc(out, func(a, b *resourceapi.ResourceClaim) int { return strings.Compare(string(a.UID), string(b.UID)) })
	return out
}

func (pl *draReference) Filter(ctx context.Context, cs fwk.CycleState, pod *v1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	r, err := removedOf(cs)
	if err != nil {
		return fwk.AsStatus(err)
	}
	if len(r.pods) == 0 {
		return pl.DynamicResources.Filter(ctx, cs, pod, nodeInfo)
	}
	freed := pl.freedClaims(r)
	if len(freed) == 0 {
		return pl.DynamicResources.Filter(ctx, cs, pod, nodeInfo)
	}
	s := pl.scratchFor(ctx, pod, freed)
	if !s.status.IsSuccess() {
		return s.status
	}
	return pl.DynamicResources.Filter(ctx, s.state, pod, nodeInfo)
}

// scratchFor: upstream's PreFilter for the pod, with the freed claims' devices not allocated.
func (pl *draReference) scratchFor(ctx context.Context, pod *v1.Pod, freed []*resourceapi.ResourceClaim) *scratch {
	uids := make([]string, 0, len(freed))
	for _, claim := range freed {
		uids = append(uids, string(claim.UID))
	}
	key := strings.Join(uids, ",")
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if s, ok := pl.scratchs[key]; ok {
		return s
	}
	pl.manager.mu.Lock()
	pl.manager.freed.Store(&freed)
	state := framework.NewCycleState()
	_, status := pl.DynamicResources.PreFilter(ctx, state, pod, nil)
	pl.manager.freed.Store(nil)
	pl.manager.mu.Unlock()
	if status.Code() == fwk.Skip {
		status = fwk.AsStatus(fmt.Errorf("DynamicResources' PreFilter skipped the pod with claims freed"))
	}
	s := &scratch{state: state, status: status}
	pl.scratchs[key] = s
	return s
}

// candidateDiagnosis: the diagnosis PostFilter is given under the reference: DynamicResources'
// "cannot allocate all claims" nodes Unschedulable (candidates), every other status as it was.
func candidateDiagnosis(diagnosis *framework.NodeToStatus) *framework.NodeToStatus {
	out := framework.NewDefaultNodeToStatus()
	out.SetAbsentNodesStatus(diagnosis.AbsentNodesStatus())
	diagnosis.ForEachExplicitNode(func(node string, s *fwk.Status) {
		reasons := s.Reasons()
		if s.Plugin() == dynamicresources.Name && s.Code() == fwk.UnschedulableAndUnresolvable && len(reasons) > 0 && reasons[0] == cannotAllocate {
			s = fwk.NewStatus(fwk.Unschedulable, reasons...).WithPlugin(s.Plugin())
		}
		out.Set(node, s)
	})
	return out
}
