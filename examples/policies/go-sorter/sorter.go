// vigil's default candidate sorter, in Go.
//
// Refuses static, mirror and system-critical pods and pods carrying a skip
// label or annotation named in the config; keeps the rest in the order given
// (the strategies' ranking).
//
// Config (JSON): {"skipLabels": ["key", ...], "skipAnnotations": ["key", ...]};
// an entry "key=value" refuses only the pods whose key has that value. Its
// interest is exactly those keys (each once): the host passes no other label
// or annotation.
//
// The packages it imports under wit_component/ are generated from vigil's
// WIT by `wit-bindgen go` at build time (build.sh); this package is the one
// the generated exports call.
package export_vigil_policy_sorter

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/vigil_policy_sorter"
	"wit_component/vigil_policy_types"
)

// config is what the sorter reads of its config.
type config struct {
	skipLabels      []string
	skipAnnotations []string
}

// readConfig reads text: blank, or a JSON object of the known fields (a
// field given twice counts once, the last; fields are read in key order).
func readConfig(text string) (config, error) {
	var read config
	if strings.TrimSpace(text) == "" {
		return read, nil
	}
	var whole any
	if err := json.Unmarshal([]byte(text), &whole); err != nil {
		return read, fmt.Errorf("config is not JSON: %v", err)
	}
	object, isObject := whole.(map[string]any)
	if !isObject {
		return read, fmt.Errorf("config must be a JSON object")
	}
	fields := make([]string, 0, len(object))
	for field := range object {
		fields = append(fields, field)
	}
	sort.Strings(fields)
	for _, field := range fields {
		var keys *[]string
		switch field {
		case "skipLabels":
			keys = &read.skipLabels
		case "skipAnnotations":
			keys = &read.skipAnnotations
		default:
			return read, fmt.Errorf("$.%s: unknown field", field)
		}
		list, err := readKeys(field, object[field])
		if err != nil {
			return read, err
		}
		*keys = list
	}
	return read, nil
}

// readKeys reads the skip entries of field: a list of strings, each naming a key.
func readKeys(field string, value any) ([]string, error) {
	items, isList := value.([]any)
	if !isList {
		return nil, fmt.Errorf("$.%s: must be a list of strings", field)
	}
	keys := make([]string, 0, len(items))
	for i, item := range items {
		entry, isString := item.(string)
		if !isString {
			return nil, fmt.Errorf("$.%s[%d]: must be a string", field, i)
		}
		if entry == "" || entry[0] == '=' {
			return nil, fmt.Errorf("$.%s[%d]: %q names no key", field, i, entry)
		}
		keys = append(keys, entry)
	}
	return keys, nil
}

// keyOf is the key of a skip entry "key" or "key=value".
func keyOf(entry string) string {
	key, _, _ := strings.Cut(entry, "=")
	return key
}

// keyNames are the keys of entries, each once, in order.
func keyNames(entries []string) []string {
	names := []string{}
	seen := map[string]bool{}
	for _, entry := range entries {
		key := keyOf(entry)
		if !seen[key] {
			seen[key] = true
			names = append(names, key)
		}
	}
	return names
}

// skippedBy is the first of pairs a skip entry matches, and whether an
// entry naming a value matches it.
func skippedBy(pairs []vigil_policy_types.KeyValue, entries []string) (*vigil_policy_types.KeyValue, bool) {
	for i := range pairs {
		found, byValue := false, false
		for _, entry := range entries {
			key, value, valued := strings.Cut(entry, "=")
			if key == pairs[i].Key && (!valued || value == pairs[i].Value) {
				found = true
				byValue = byValue || valued
			}
		}
		if found {
			return &pairs[i], byValue
		}
	}
	return nil, false
}

// named is "what key", or "what key=value" when a skip entry named the value.
func named(what string, pair *vigil_policy_types.KeyValue, byValue bool) string {
	if byValue {
		return fmt.Sprintf("%s %s=%s", what, pair.Key, pair.Value)
	}
	return fmt.Sprintf("%s %s", what, pair.Key)
}

// refusal is why pod must not be evicted, or "" if it may be.
func refusal(pod *vigil_policy_types.Pod, read *config) string {
	switch {
	case pod.IsStatic:
		return "static pod"
	case pod.IsMirror:
		return "mirror pod"
	case pod.IsCritical:
		return "system-critical pod"
	}
	if pair, byValue := skippedBy(pod.Labels, read.skipLabels); pair != nil {
		return named("carries skip label", pair, byValue)
	}
	if pair, byValue := skippedBy(pod.Annotations, read.skipAnnotations); pair != nil {
		return named("carries skip annotation", pair, byValue)
	}
	return ""
}

// DeclareInterest names the skip keys (none if the config is invalid: Sort
// reports that).
func DeclareInterest(text string) vigil_policy_types.Interest {
	read, _ := readConfig(text)
	return vigil_policy_types.Interest{
		Labels:      keyNames(read.skipLabels),
		Annotations: keyNames(read.skipAnnotations),
		Facts:       []vigil_policy_types.PodFact{},
	}
}

// Sort keeps the candidates in the order given, less those it refuses.
func Sort(_ []string, candidates []vigil_policy_sorter.Candidate, text string) witTypes.Result[vigil_policy_sorter.Sorted, string] {
	read, err := readConfig(text)
	if err != nil {
		return witTypes.Err[vigil_policy_sorter.Sorted](err.Error())
	}
	sorted := vigil_policy_sorter.Sorted{Order: []uint32{}, Rejected: []vigil_policy_sorter.Rejection{}}
	for i := range candidates {
		if reason := refusal(&candidates[i].Pod, &read); reason != "" {
			sorted.Rejected = append(sorted.Rejected, vigil_policy_sorter.Rejection{Index: uint32(i), Reason: reason})
		} else {
			sorted.Order = append(sorted.Order, uint32(i))
		}
	}
	return witTypes.Ok[vigil_policy_sorter.Sorted, string](sorted)
}
