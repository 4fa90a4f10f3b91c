// __NAME__: an eviction strategy for vigil.
//
// The threshold is met (hard) while `memory.available` is below a tenth of the
// node's memory; the victims are the pods using the most memory. Make it yours:
// read your settings from `snapshot.Config` (JSON, `policies.__NAME__.config`)
// and answer an error (`witTypes.Err`) when they are wrong or a signal is
// missing.
//
// The packages under wit_component/ are generated from wit/ by `wit-bindgen
// go` at build time (build.sh); this package is the one their exports call.
// Records are structs, enums are integer constants (MetLevel_Hard), an
// option is a witTypes.Option (`Get()` gives its value and whether it has
// one). A panic traps the call: a fault, which rolls a new version back.
package export_vigil_policy_strategy

import (
	"fmt"
	"slices"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/vigil_policy_strategy"
	"wit_component/vigil_policy_types"
)

const (
	signalName = "memory.available"
	scopeName  = "memory"
)

// DeclareInterest reads no labels, annotations or pod facts; Evaluate
// judges the kubelet's signals only (name others in Signals to get them).
func DeclareInterest(_ string) vigil_policy_strategy.StrategyInterest {
	return vigil_policy_strategy.StrategyInterest{
		Keys: vigil_policy_types.Interest{
			Labels:      []string{},
			Annotations: []string{},
			Facts:       []vigil_policy_types.PodFact{},
		},
		PodsInEvaluate: false,
		Signals:        []string{},
	}
}

// Evaluate meets the threshold while memory.available is under a tenth of
// the node's memory.
func Evaluate(snapshot vigil_policy_strategy.Snapshot) witTypes.Result[vigil_policy_strategy.Decision, string] {
	index := slices.IndexFunc(snapshot.Signals, func(s vigil_policy_strategy.Signal) bool { return s.Name == signalName })
	if index < 0 {
		return witTypes.Err[vigil_policy_strategy.Decision](signalName + " is missing")
	}
	signal := snapshot.Signals[index]
	capacity, known := signal.Capacity.Get()
	if !known {
		return witTypes.Err[vigil_policy_strategy.Decision](signalName + " has no capacity")
	}
	threshold := capacity / 10
	met := vigil_policy_strategy.MetLevel_NotMet
	condition := witTypes.None[vigil_policy_strategy.Condition]()
	if signal.Value < threshold {
		met = vigil_policy_strategy.MetLevel_Hard
		condition = witTypes.Some(vigil_policy_strategy.Condition{Name: "MemoryPressure", Effects: []string{"NoSchedule"}})
	}
	return witTypes.Ok[vigil_policy_strategy.Decision, string](vigil_policy_strategy.Decision{
		Thresholds: []vigil_policy_strategy.Threshold{{
			Met: met, Scope: scopeName, Signal: signalName, Observed: signal.Value, Threshold: threshold,
			GracePeriodSeconds: 0, Condition: condition,
		}},
		SoftCandidates: []vigil_policy_strategy.Eviction{},
		ForceEvictions: []vigil_policy_strategy.Eviction{},
		State:          witTypes.None[[]uint8](),
	})
}

// used is the pod's memory; a usage the host could not read is absent: 0 here.
func used(pod *vigil_policy_types.Pod) uint64 {
	bytes, _ := pod.Usage.MemoryWorkingSetBytes.Get()
	return bytes
}

// TopVictims names the n pods using the most memory, ties by UID.
func TopVictims(snapshot vigil_policy_strategy.Snapshot, scope string, n uint32) witTypes.Result[[]vigil_policy_strategy.Eviction, string] {
	if scope != scopeName {
		return witTypes.Err[[]vigil_policy_strategy.Eviction]("unknown scope " + scope)
	}
	pods := slices.Clone(snapshot.Pods)
	slices.SortFunc(pods, func(a, b vigil_policy_types.Pod) int {
		if used(&a) != used(&b) {
			if used(&a) > used(&b) {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Uid, b.Uid)
	})
	victims := []vigil_policy_strategy.Eviction{}
	for i := range min(len(pods), int(n)) {
		victims = append(victims, vigil_policy_strategy.Eviction{
			Uid:                pods[i].Uid,
			Reason:             fmt.Sprintf("uses %d MiB of memory", used(&pods[i])>>20),
			GracePeriodSeconds: witTypes.None[uint64](),
		})
	}
	return witTypes.Ok[[]vigil_policy_strategy.Eviction, string](victims)
}
