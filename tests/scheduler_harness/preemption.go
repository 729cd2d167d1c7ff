// Preemption (PostFilter) for cases that ask for it ("preempt": true): what kube-scheduler
// 1.37.2's schedulePod does when no node passed the filters, and what DefaultPreemption would
// choose, reported so that draxr's core.preemption can be compared with it.
//
// Output, under "preemption" in the case's result (only for such cases, and only when no node is
// feasible):
//
//	{"code": "...", "plugin": "...", "message": "...",   // RunPostFilterPlugins' status
//	 "nominatedNode": null | "" | "<node>",               // PostFilterResult: null = unchanged,
//	                                                      // "" = cleared, else the nominated node
//	 "fitError": "...",                                   // the FailedScheduling message (FitError
//	                                                      // with PostFilterMsg)
//	 "evicted": ["ns/name", ...],                         // victims the real PostFilter preempted
//	                                                      // (sorted; API calls are skipped for
//	                                                      // victims already being deleted)
//	 "candidates": {"<node>": {"victims": ["ns/name", ...], "numPDBViolations": n}},
//	 "choices": ["<node>", ...],                          // the nodes SelectCandidate may choose
//	 "statuses": {"<node>": {"plugin", "code", "reasons"}}, // dry run: potential nodes rejected
//	 "pdbOrders": n}                                      // PDB orders the self-check accepted
//
// How: the framework is the default profile's, with the case's nominated pods (unbound pods with
// status.nominatedNodeName, and the incoming pod if it has one) in its PodNominator, and the
// PodDisruptionBudgets in the informer DefaultPreemption lists. The diagnosis is built as
// findNodesThatFitPod builds it (a PreFilter rejection: every node absent with that status;
// a narrowing PreFilterResult: absent nodes UnschedulableAndUnresolvable; the filters' statuses
// per node). For cases with "draPreemption" (the device family), DynamicResources is the harness's
// DRA preemption reference, and in the diagnosis given to PostFilter and to the dry run below
// DynamicResources' "cannot allocate all claims" nodes are Unschedulable (dra_preemption.go). Then:
//
//   - the real thing: RunPostFilterPlugins (DynamicResources, then DefaultPreemption), with the
//     plugin's Executor.PreemptPod replaced by a recorder (the async actuation runs, but nothing
//     is deleted; the harness waits for it to finish);
//   - the candidates: Evaluator.DryRunPreemption on the nodes whose status is Unschedulable, with
//     the PDBs in the case's order, offset 0 and calculateNumCandidates' count (every potential
//     node is tried below 100), then SelectCandidate. pickOneNodeForPreemption breaks its last tie
//     by Go map order, so "choices" is every candidate that ties with the winner: c ties when
//     SelectCandidate on {winner, c} returns c in one of 64 tries;
//   - a self-check: the real outcome must be one the dry run predicts (the node among the
//     choices, the message, the evicted victims; without candidates the FitError message built
//     from the dry run's statuses). FilterVictimsWithPDBViolation depends on the order of the PDBs
//     when a pod matches more than one, and the lister's order is random: then every order is
//     dry-run and the real outcome must match one of them. A failed self-check is the case's
//     error.
package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultpreemption"
	"k8s.io/kubernetes/pkg/scheduler/framework/preemption"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

type candidateOut struct {
	Victims          []string `json:"victims"`
	NumPDBViolations int64    `json:"numPDBViolations"`
}

type preemptionResult struct {
	Code          string                   `json:"code"`
	Plugin        string                   `json:"plugin"`
	Message       string                   `json:"message"`
	NominatedNode *string                  `json:"nominatedNode"`
	FitError      string                   `json:"fitError"`
	Evicted       []string                 `json:"evicted"`
	Candidates    map[string]*candidateOut `json:"candidates"`
	Choices       []string                 `json:"choices"`
	Statuses      map[string]*nodeStatus   `json:"statuses"`
	PDBOrders     int                      `json:"pdbOrders"`
	// Wall seconds of RunPostFilterPlugins' own call (the evictions run after it, in a goroutine):
	// bench/preemption_decisions.py --upstream prints it beside draxr's; no test reads it.
	PostFilterSeconds float64 `json:"postFilterSeconds"`
}

// caseNominator: the scheduling queue's nominator as it would be for the case's pods (the
// pending pods with status.nominatedNodeName), and a PodActivator that does nothing.
type caseNominator struct {
	byNode map[string][]fwk.PodInfo
}

func newCaseNominator(pod *v1.Pod, pods []*v1.Pod) (*caseNominator, error) {
	n := &caseNominator{byNode: map[string][]fwk.PodInfo{}}
	for _, p := range append(slices.Clone(pods), pod) {
		node := p.Status.NominatedNodeName
		if node == "" || p.Spec.NodeName != "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		info, err := framework.NewPodInfo(p)
		if err != nil {
			return nil, fmt.Errorf("nominated pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		n.byNode[node] = append(n.byNode[node], info)
	}
	return n, nil
}

func (n *caseNominator) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (n *caseNominator) DeleteNominatedPodIfExists(*v1.Pod)                            {}
func (n *caseNominator) UpdateNominatedPod(klog.Logger, *v1.Pod, fwk.PodInfo)          {}
func (n *caseNominator) NominatedPodsForNode(node string) []fwk.PodInfo {
	return slices.Clone(n.byNode[node])
}
func (n *caseNominator) Activate(klog.Logger, map[string]*v1.Pod) {}

// capturingRegistry returns a copy of the registry whose DefaultPreemption factory stores the
// plugin it builds in *out.
func capturingRegistry(registry frameworkruntime.Registry, out **defaultpreemption.DefaultPreemption) frameworkruntime.Registry {
	copied := make(frameworkruntime.Registry, len(registry))
	for name, factory := range registry {
		copied[name] = factory
	}
	inner := registry[defaultpreemption.Name]
	copied[defaultpreemption.Name] = func(ctx context.Context, args apiruntime.Object, h fwk.Handle) (fwk.Plugin, error) {
		p, err := inner(ctx, args, h)
		if err != nil {
			return nil, err
		}
		pl, ok := p.(*defaultpreemption.DefaultPreemption)
		if !ok {
			return nil, fmt.Errorf("DefaultPreemption's factory built a %T", p)
		}
		*out = pl
		return pl, nil
	}
	return copied
}

// cycle is what schedule() leaves for PostFilter: the cycle state and the diagnosis.
type cycle struct {
	state        fwk.CycleState
	diagnosis    *framework.NodeToStatus
	preFilterMsg string
	numAllNodes  int
	feasible     int
}

func podKey(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

func victimNames(pods []*v1.Pod) []string {
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, podKey(p))
	}
	return out
}

type dryOutcome struct {
	candidates map[string]*candidateOut
	choices    []string
	statuses   map[string]*nodeStatus
	fitError   string // "preemption: " + the FitError DefaultPreemption returns without candidates
	err        error  // DryRunPreemption's aggregated error (upstream returns it without candidates)
}

// dryRun: the candidates, the nodes SelectCandidate may pick, and the rejected nodes' statuses.
func dryRun(ctx context.Context, pl *defaultpreemption.DefaultPreemption, f framework.Framework, c *cycle, pod *v1.Pod, pdbs []*policyv1.PodDisruptionBudget) (*dryOutcome, error) {
	ev := pl.Evaluator
	potential, err := c.diagnosis.NodesForStatusCode(f.MutableSnapshotSharedLister().NodeInfos(), fwk.Unschedulable)
	if err != nil {
		return nil, err
	}
	out := &dryOutcome{candidates: map[string]*candidateOut{}, choices: []string{}, statuses: map[string]*nodeStatus{}}
	nodeStatuses := framework.NewDefaultNodeToStatus()
	var candidates []preemption.Candidate
	if len(potential) > 0 {
		_, num := pl.GetOffsetAndNumCandidates(int32(len(potential)))
		candidates, nodeStatuses, out.err = ev.DryRunPreemption(ctx, c.state, pod, potential, pdbs, 0, num)
	}
	nodeStatuses.ForEachExplicitNode(func(node string, s *fwk.Status) { out.statuses[node] = statusOf(s) })
	for _, cand := range candidates {
		out.candidates[cand.Name()] = &candidateOut{Victims: victimNames(cand.Victims().Pods), NumPDBViolations: cand.Victims().NumPDBViolations}
	}
	if len(candidates) == 0 {
		fitError := &framework.FitError{Pod: pod, NumAllNodes: c.numAllNodes, Diagnosis: framework.Diagnosis{NodeToStatus: nodeStatuses}}
		fitError.Diagnosis.NodeToStatus.SetAbsentNodesStatus(fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "Preemption is not helpful for scheduling"))
		out.fitError = "preemption: " + fitError.Error()
		return out, nil
	}
	winner := ev.SelectCandidate(ctx, candidates)
	if winner == nil {
		return nil, fmt.Errorf("SelectCandidate chose nothing among %d candidates", len(candidates))
	}
	out.choices = append(out.choices, winner.Name())
	for _, cand := range candidates {
		if cand.Name() == winner.Name() {
			continue
		}
		for range 64 {
			if ev.SelectCandidate(ctx, []preemption.Candidate{winner, cand}).Name() == cand.Name() {
				out.choices = append(out.choices, cand.Name())
				break
			}
		}
	}
	sort.Strings(out.choices)
	return out, nil
}

// pdbOverlap: some pod on a node matches more than one PDB (the order of the PDBs then matters).
func pdbOverlap(f framework.Framework, pdbs []*policyv1.PodDisruptionBudget) (bool, error) {
	if len(pdbs) < 2 {
		return false, nil
	}
	nodes, err := f.MutableSnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return false, err
	}
	for _, n := range nodes {
		for _, pi := range n.GetPods() {
			p := pi.GetPod()
			matching := 0
			for _, pdb := range pdbs {
				if pdb.Namespace != p.Namespace || len(p.Labels) == 0 {
					continue
				}
				sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
				if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
					continue
				}
				matching++
			}
			if matching > 1 {
				return true, nil
			}
		}
	}
	return false, nil
}

func permutations[T any](items []T) [][]T {
	if len(items) <= 1 {
		return [][]T{slices.Clone(items)}
	}
	var out [][]T
	for i := range items {
		rest := append(slices.Clone(items[:i]), items[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]T{items[i]}, p...))
		}
	}
	return out
}

// recorder replaces Executor.PreemptPod: records the victims, deletes nothing.
type recorder struct {
	mu      sync.Mutex
	evicted []string
}

func (r *recorder) preemptPod(_ context.Context, _ preemption.Candidate, _ preemption.ExecutorPreemptor, victim *v1.Pod, _ string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evicted = append(r.evicted, podKey(victim))
	return false, nil
}

func runPreemption(ctx context.Context, f framework.Framework, pl *defaultpreemption.DefaultPreemption, c *cycle, pod *v1.Pod, pods []*v1.Pod, pdbs []*policyv1.PodDisruptionBudget, timeOnly bool) (*preemptionResult, error) {
	if pl == nil {
		return nil, fmt.Errorf("the DefaultPreemption plugin was not built")
	}
	rec := &recorder{}
	pl.Executor.PreemptPod = rec.preemptPod

	// The real PostFilter, as schedulePod runs it.
	started := time.Now()
	postResult, status := f.RunPostFilterPlugins(ctx, c.state, pod, c.diagnosis)
	took := time.Since(started).Seconds()
	deadline := time.Now().Add(30 * time.Second)
	for pl.Executor.IsPodRunningPreemption(pod.UID) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the asynchronous preemption did not finish")
		}
		time.Sleep(time.Millisecond)
	}
	res := &preemptionResult{
		Code:              status.Code().String(),
		Plugin:            status.Plugin(),
		Message:           status.Message(),
		Evicted:           []string{},
		PostFilterSeconds: took,
	}
	if postResult != nil && postResult.NominatingInfo != nil && postResult.Mode() == fwk.ModeOverride {
		node := postResult.NominatedNodeName
		res.NominatedNode = &node
	}
	fitError := &framework.FitError{
		Pod:         pod,
		NumAllNodes: c.numAllNodes,
		Diagnosis:   framework.Diagnosis{NodeToStatus: c.diagnosis, PreFilterMsg: c.preFilterMsg, PostFilterMsg: status.Message()},
	}
	res.FitError = fitError.Error()
	rec.mu.Lock()
	res.Evicted = append(res.Evicted, rec.evicted...)
	rec.mu.Unlock()
	sort.Strings(res.Evicted)

	// Did DefaultPreemption get as far as the candidates? (Success, or no candidate: the result
	// then clears the nomination.)
	if !status.IsSuccess() && res.NominatedNode == nil || timeOnly {
		// (timeOnly: the bench's big clusters, where upstream's random offset and candidate
		// count make its choice one the dry run at offset 0 need not predict.)
		return res, nil
	}
	main, err := dryRun(ctx, pl, f, c, pod, pdbs)
	if err != nil {
		return nil, err
	}
	res.Candidates, res.Choices, res.Statuses = main.candidates, main.choices, main.statuses

	// The self-check: the real outcome is one the dry run predicts (for some order of the PDBs).
	outcomes := []*dryOutcome{main}
	overlap, err := pdbOverlap(f, pdbs)
	if err != nil {
		return nil, err
	}
	if overlap {
		for _, order := range permutations(pdbs)[1:] {
			o, err := dryRun(ctx, pl, f, c, pod, order)
			if err != nil {
				return nil, err
			}
			outcomes = append(outcomes, o)
		}
	}
	res.PDBOrders = len(outcomes)
	deleting := map[string]bool{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			deleting[podKey(p)] = true
		}
	}
	var why []string
	for _, o := range outcomes {
		problem := explainMismatch(res, o, deleting)
		if problem == "" {
			return res, nil
		}
		why = append(why, problem)
	}
	return nil, fmt.Errorf("harness self-check: the real PostFilter's outcome is not what DryRunPreemption+SelectCandidate predict: %s", strings.Join(why, "; "))
}

func explainMismatch(res *preemptionResult, o *dryOutcome, deleting map[string]bool) string {
	if len(o.candidates) == 0 {
		want := o.fitError
		if o.err != nil {
			want = "preemption: " + o.err.Error()
		}
		if res.Message != want || res.NominatedNode == nil || *res.NominatedNode != "" {
			return fmt.Sprintf("no candidates: want message %q and the nomination cleared, got %q (nominated %v)", want, res.Message, res.NominatedNode)
		}
		return ""
	}
	if res.NominatedNode == nil {
		return fmt.Sprintf("nominated nothing (message %q), the choices %v", res.Message, o.choices)
	}
	if !slices.Contains(o.choices, *res.NominatedNode) {
		return fmt.Sprintf("nominated %q (message %q, evicted %v), not among the choices %v", *res.NominatedNode, res.Message, res.Evicted, o.choices)
	}
	node := *res.NominatedNode
	cand := o.candidates[node]
	want := fmt.Sprintf("preemption: found a potential placement for pod on node %v, preempting %d victims", node, len(cand.Victims))
	if res.Message != want {
		return fmt.Sprintf("message %q, want %q", res.Message, want)
	}
	evicted := []string{}
	for _, v := range cand.Victims {
		if !deleting[v] {
			evicted = append(evicted, v)
		}
	}
	sort.Strings(evicted)
	if !slices.Equal(evicted, res.Evicted) {
		return fmt.Sprintf("evicted %v, want %v (node %s)", res.Evicted, evicted, node)
	}
	return ""
}
