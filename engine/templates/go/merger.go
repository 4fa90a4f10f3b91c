// __NAME__: a config merger for vigil.
//
// Each layer applies over the ones before it as a JSON merge patch (RFC 7386:
// objects merge key by key, null deletes, anything else replaces). A merger
// decides merge rules only; vigil checks every layer and the result against
// its config schema. It serves under the name `default-merger`.
//
// The packages under wit_component/ are generated from wit/ by `wit-bindgen
// go` at build time (build.sh); this package is the one their exports call.
// A panic traps the call: a fault, which rolls a new version back.
package export_vigil_policy_merger

import (
	"bytes"
	"encoding/json"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/vigil_policy_merger"
)

// object is text as a JSON object, numbers kept as written; false if it is
// not one.
func object(text string) (map[string]any, bool) {
	if !json.Valid([]byte(text)) {
		return nil, false
	}
	decoder := json.NewDecoder(bytes.NewReader([]byte(text)))
	decoder.UseNumber()
	var value any
	if decoder.Decode(&value) != nil {
		return nil, false
	}
	read, isObject := value.(map[string]any)
	return read, isObject
}

// mergePatch applies patch over target.
func mergePatch(target, patch any) any {
	fields, isObject := patch.(map[string]any)
	if !isObject {
		return patch
	}
	merged, isObject := target.(map[string]any)
	if !isObject {
		merged = map[string]any{}
	}
	for key, value := range fields {
		if value == nil {
			delete(merged, key)
		} else {
			merged[key] = mergePatch(merged[key], value)
		}
	}
	return merged
}

// Merge applies the layers in order; a layer that is not a JSON object is
// rejected.
func Merge(layers []vigil_policy_merger.Layer) witTypes.Result[string, []vigil_policy_merger.Rejection] {
	var merged any = map[string]any{}
	rejections := []vigil_policy_merger.Rejection{}
	for _, layer := range layers {
		value, isObject := object(layer.Json)
		if !isObject {
			rejections = append(rejections, vigil_policy_merger.Rejection{
				Source: layer.Source, Field: "$", Reason: "layer must be a JSON object",
			})
			continue
		}
		merged = mergePatch(merged, value)
	}
	if len(rejections) > 0 {
		return witTypes.Err[string](rejections)
	}
	text, err := json.Marshal(merged)
	if err != nil {
		panic(err)
	}
	return witTypes.Ok[string, []vigil_policy_merger.Rejection](string(text))
}
