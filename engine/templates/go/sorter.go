// __NAME__: a candidate sorter for vigil.
//
// Refuses static, mirror and system-critical pods; orders the rest by memory
// used, most first, then by UID. vigil evicts in this order: under a threshold
// it gives the strategy's ranking and evicts the first pod of yours. Make it
// yours: change `evictFirst`, read your settings from `config` (JSON,
// `policies.__NAME__.config`) and answer an error (`witTypes.Err`) when they
// are wrong; declare the labels and annotations you read.
//
// The packages under wit_component/ are generated from wit/ by `wit-bindgen
// go` at build time (build.sh); this package is the one their exports call.
// Records are structs, an option is a witTypes.Option (`Get()` gives its
// value and whether it has one). A panic traps the call: a fault, which
// rolls a new version back.
package export_vigil_policy_sorter

import (
	"slices"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/vigil_policy_sorter"
	"wit_component/vigil_policy_types"
)

// refusal is why pod must not be evicted, or "".
func refusal(pod *vigil_policy_types.Pod) string {
	switch {
	case pod.IsStatic:
		return "static pod"
	case pod.IsMirror:
		return "mirror pod"
	case pod.IsCritical:
		return "system-critical pod"
	}
	return ""
}

// evictFirst is the eviction order's key: the pod with the larger key goes
// first, ties by UID. Here the pod using the most memory; newest first would
// be `uint64(pod.StartTimeMs)`. A usage the host could not read is absent: 0
// here.
func evictFirst(pod *vigil_policy_types.Pod) uint64 {
	bytes, _ := pod.Usage.MemoryWorkingSetBytes.Get()
	return bytes
}

// DeclareInterest reads no labels, annotations or pod facts.
func DeclareInterest(_ string) vigil_policy_types.Interest {
	return vigil_policy_types.Interest{Labels: []string{}, Annotations: []string{}, Facts: []vigil_policy_types.PodFact{}}
}

// Sort refuses what refusal refuses and orders the rest by evictFirst.
func Sort(_ []string, candidates []vigil_policy_sorter.Candidate, _ string) witTypes.Result[vigil_policy_sorter.Sorted, string] {
	sorted := vigil_policy_sorter.Sorted{Order: []uint32{}, Rejected: []vigil_policy_sorter.Rejection{}}
	for i := range candidates {
		if reason := refusal(&candidates[i].Pod); reason != "" {
			sorted.Rejected = append(sorted.Rejected, vigil_policy_sorter.Rejection{Index: uint32(i), Reason: reason})
		} else {
			sorted.Order = append(sorted.Order, uint32(i))
		}
	}
	slices.SortFunc(sorted.Order, func(a, b uint32) int {
		first, second := &candidates[a].Pod, &candidates[b].Pod
		if evictFirst(first) != evictFirst(second) {
			if evictFirst(first) > evictFirst(second) {
				return -1
			}
			return 1
		}
		return strings.Compare(first.Uid, second.Uid)
	})
	return witTypes.Ok[vigil_policy_sorter.Sorted, string](sorted)
}
