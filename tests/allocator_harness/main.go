// Command allocator-harness runs upstream's DRA structured allocator
// (k8s.io/dynamic-resource-allocation/structured, the exact module version in go.mod)
// on a batch of cases and reports what it returns, so that draxr's Python port can be
// compared against it (tests/differential).
//
// Input on stdin: one JSON list of cases (or {"cases": [...]}):
//
//	{"name": "...",
//	 "features": {"AdminAccess": true, ...},   // upstream structured.Features field names;
//	                                           // omitted = kube-scheduler 1.37.2 defaults,
//	                                           // present = missing names are false
//	 "node": <v1 Node>,
//	 "slices": [<v1 ResourceSlice>], "classes": [<v1 DeviceClass>],
//	 "claims": [<v1 ResourceClaim to allocate>],
//	 "allocated": [<v1 ResourceClaim with status.allocation>]}  // alias: "allocatedClaims"
//
// Output on stdout: one JSON list with one outcome per case, in input order:
//
//	{"name": "...", "kind": "allocated"|"nofit"|"node_failure"|"fatal"|"panic",
//	 "results": [<v1 AllocationResult per claim>], "error": "...",
//	 "variant": "incubating", "allocateOneCalls": 12}
//
// kind follows the scheduler's reading of Allocate's return values: nil, nil is "nofit";
// an error wrapping structured.ErrFailedAllocationOnNode is "node_failure" (this node
// only); any other error is "fatal" (aborts the pod's scheduling attempt). A Go panic
// inside the allocator is reported as "panic" instead of crashing the batch.
//
// The allocated state is built the way kube-scheduler 1.37.2 builds it
// (pkg/scheduler/framework/plugins/dynamicresources/allocateddevices.go,
// foreachAllocatedDevice + GatherAllocatedState): results with adminAccess are skipped;
// with ConsumableCapacity on, a result with a shareID is recorded as a shared device ID
// and its consumedCapacity is added to the aggregated capacity; everything else is an
// allocated device.
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
	"runtime/debug"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// defaultFeatures is what kube-scheduler 1.37.2 passes with default feature gates
// (AllocatorFeatures in pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go,
// gate defaults in pkg/features/kube_features.go at v1.37.2):
//   - DRAAdminAccess GA, DRAPrioritizedList GA (locked), DRADeviceTaints GA: on
//   - DRAPartitionableDevices beta on, DRAConsumableCapacity beta on
//   - DeviceBindingAndStatus = DRADeviceBindingConditions (beta on) && DRAResourceClaimDeviceStatus (GA): on
//   - DRAFractionalCapacityRange beta, on only with --min-compatibility-version >= 1.37
//     (the default min compatibility version of a 1.37 binary is 1.36): off
//   - DRAListTypeAttributes, DRAOptionalNodeOperations, DRADerivedAttributes,
//     DRADeviceCompatibilityGroups: alpha, off
//
// With this set NewAllocator picks the "incubating" variant.
var defaultFeatures = structured.Features{
	AdminAccess:            true,
	ConsumableCapacity:     true,
	DeviceBindingAndStatus: true,
	DeviceTaints:           true,
	PartitionableDevices:   true,
	PrioritizedList:        true,
}

type testCase struct {
	Name      string                       `json:"name"`
	Features  json.RawMessage              `json:"features,omitempty"`
	Node      *v1.Node                     `json:"node"`
	Slices    []*resourceapi.ResourceSlice `json:"slices"`
	Classes   []*resourceapi.DeviceClass   `json:"classes"`
	Claims    []*resourceapi.ResourceClaim `json:"claims"`
	Allocated []*resourceapi.ResourceClaim `json:"allocated"`
	// AllocatedClaims is an alias of Allocated (the spelling draxr's
	// operator/draxr_dev/allocator/cases.py uses). Their union forms the allocated state.
	AllocatedClaims []*resourceapi.ResourceClaim `json:"allocatedClaims"`
	// Family and Tags are ignored; the case generator records what a case exercises.
	Family string   `json:"family,omitempty"`
	Tags   []string `json:"tags,omitempty"`
}

type outcome struct {
	Name             string                         `json:"name"`
	Kind             string                         `json:"kind"`
	Results          []resourceapi.AllocationResult `json:"results,omitempty"`
	Error            string                         `json:"error,omitempty"`
	Variant          string                         `json:"variant,omitempty"`
	AllocateOneCalls *int64                         `json:"allocateOneCalls,omitempty"`
	Features         *structured.Features           `json:"features,omitempty"`
}

type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	result := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, class := range l {
		result = append(result, class)
	}
	return result, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	class, ok := l[name]
	if !ok {
		return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
	}
	return class, nil
}

// allocatedState mirrors kube-scheduler's allocatedDevices tracker plus GatherAllocatedState
// (or ListAllAllocatedDevices when DRAConsumableCapacity is off) for claims that are all
// committed (none in flight).
func allocatedState(claims []*resourceapi.ResourceClaim, consumableCapacity bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim == nil || claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if ptr.Deref(result.AdminAccess, false) {
				// Is not considered as allocated.
				continue
			}
			deviceID := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if consumableCapacity && result.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(deviceID, result.ShareID))
				if result.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(deviceID, result.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(deviceID)
		}
	}
	return state
}

func decodeFeatures(raw json.RawMessage) (structured.Features, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return defaultFeatures, nil
	}
	var features structured.Features
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&features); err != nil {
		return features, fmt.Errorf("features: %w", err)
	}
	return features, nil
}

// callInt64Method and callStringMethod read optional methods of the concrete allocator
// (Channel, GetStats) whose result types live in an internal package.
func callMethod(obj any, name string) (reflect.Value, bool) {
	m := reflect.ValueOf(obj).MethodByName(name)
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return reflect.Value{}, false
	}
	return m.Call(nil)[0], true
}

type celCacheKey struct{ consumableCapacity, listTypeAttributes bool }

type runner struct {
	celCaches map[celCacheKey]*cel.Cache
	timeout   time.Duration
}

func (r *runner) celCache(features structured.Features) *cel.Cache {
	key := celCacheKey{features.ConsumableCapacity, features.ListTypeAttributes}
	cache, ok := r.celCaches[key]
	if !ok {
		// kube-scheduler: cel.NewCache(10, cel.Features{...}) shared by all pods.
		cache = cel.NewCache(10, cel.Features{
			EnableConsumableCapacity: features.ConsumableCapacity,
			EnableListTypeAttributes: features.ListTypeAttributes,
		})
		r.celCaches[key] = cache
	}
	return cache
}

func (r *runner) run(tc *testCase) (out outcome) {
	out.Name = tc.Name
	defer func() {
		if p := recover(); p != nil {
			out.Kind = "panic"
			out.Results = nil
			out.Error = fmt.Sprintf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	features, err := decodeFeatures(tc.Features)
	if err != nil {
		out.Kind = "invalid_case"
		out.Error = err.Error()
		return out
	}
	out.Features = &features
	if tc.Node == nil {
		out.Kind = "invalid_case"
		out.Error = "node is missing"
		return out
	}
	classes := make(classLister, len(tc.Classes))
	for _, class := range tc.Classes {
		classes[class.Name] = class
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("case", tc.Name, "node", tc.Node.Name))

	state := allocatedState(append(tc.Allocated, tc.AllocatedClaims...), features.ConsumableCapacity)
	allocator, err := structured.NewAllocator(ctx, features, state, classes, tc.Slices, r.celCache(features))
	if err != nil {
		out.Kind = "fatal"
		out.Error = "NewAllocator: " + err.Error()
		return out
	}
	if v, ok := callMethod(allocator, "Channel"); ok && v.Kind() == reflect.String {
		out.Variant = v.String()
	}
	results, err := allocator.Allocate(ctx, tc.Node, tc.Claims)
	if v, ok := callMethod(allocator, "GetStats"); ok && v.Kind() == reflect.Struct {
		if f := v.FieldByName("NumAllocateOneInvocations"); f.IsValid() && f.CanInt() {
			calls := f.Int()
			out.AllocateOneCalls = &calls
		}
	}
	switch {
	case err != nil && errors.Is(err, structured.ErrFailedAllocationOnNode):
		out.Kind = "node_failure"
		out.Error = err.Error()
	case err != nil:
		out.Kind = "fatal"
		out.Error = err.Error()
	case results == nil:
		out.Kind = "nofit"
	default:
		out.Kind = "allocated"
		out.Results = results
	}
	return out
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
	// Unknown fields are most likely typos in the case generator, which would make the
	// two allocators see different inputs.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cases); err != nil {
		return nil, err
	}
	return cases, nil
}

func main() {
	klog.InitFlags(nil)
	timeout := flag.Duration("timeout", 10*time.Second, "per-case Allocate timeout (kube-scheduler's default DRA filter timeout is 10s)")
	printDefaults := flag.Bool("print-default-features", false, "print the default features as JSON and exit")
	flag.Parse()

	if *printDefaults {
		if err := json.NewEncoder(os.Stdout).Encode(defaultFeatures); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	cases, err := readCases(bufio.NewReader(os.Stdin))
	if err != nil {
		fmt.Fprintf(os.Stderr, "allocator-harness: reading cases: %v\n", err)
		os.Exit(2)
	}
	r := &runner{celCaches: map[celCacheKey]*cel.Cache{}, timeout: *timeout}
	outcomes := make([]outcome, 0, len(cases))
	for _, tc := range cases {
		outcomes = append(outcomes, r.run(tc))
	}
	w := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(outcomes); err != nil {
		fmt.Fprintf(os.Stderr, "allocator-harness: writing outcomes: %v\n", err)
		os.Exit(2)
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "allocator-harness: writing outcomes: %v\n", err)
		os.Exit(2)
	}
}
