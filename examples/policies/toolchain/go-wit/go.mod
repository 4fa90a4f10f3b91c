// The Go package that `wit-bindgen go` (0.63.0) output imports for WIT's
// option and result types and for the memory the host writes arguments
// into. That module is not served by the Go module proxy this project
// builds from, so a policy's go.mod replaces it with this one, vigil's own
// implementation of the few names the bindings use.
module go.bytecodealliance.org/pkg

go 1.24
