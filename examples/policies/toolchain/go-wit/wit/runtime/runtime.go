// Package runtime: the memory the canonical ABI moves values through. The
// host writes a call's arguments into memory it asks for with cabi_realloc,
// pinned until the bindings have read them (Unpin); the bindings write an
// answer's lists and strings into memory from Allocate, pinned until the
// host has read it (the post-return function unpins).
package runtime

import (
	goruntime "runtime"
	"runtime/debug"
	"unsafe"
)

// The collector is off. vigil runs each call in a fresh instance, whose
// memory goes with it, so a call's garbage never needs collecting; and a
// collection started by an allocation inside cabi_realloc reads the clock,
// a host call the canonical ABI forbids there (the WASI adapter traps:
// "assertion failed at adapter line …" in clock_time_get). A call that
// allocates past its memory limit fails on that limit instead.
func init() {
	debug.SetGCPercent(-1)
}

// arguments pins what the host allocated for the arguments of the call in
// progress.
var arguments = goruntime.Pinner{}

// Allocate returns size bytes (at least one word) aligned to align, at most
// 8, pinned by pinner.
func Allocate(pinner *goruntime.Pinner, size, align uintptr) unsafe.Pointer {
	if align > 8 {
		panic("Allocate: alignment over 8")
	}
	words := make([]uint64, max(1, (size+7)/8))
	pointer := unsafe.Pointer(unsafe.SliceData(words))
	pinner.Pin(pointer)
	return pointer
}

// Unpin releases the memory of the call's arguments.
func Unpin() { arguments.Unpin() }

// cabiRealloc is where the host asks for memory for arguments. The host
// only ever allocates afresh (a null old pointer).
//
//go:wasmexport cabi_realloc
func cabiRealloc(old unsafe.Pointer, oldSize, align, newSize uintptr) unsafe.Pointer {
	if old != nil {
		panic("cabi_realloc: a reallocation")
	}
	return Allocate(&arguments, newSize, align)
}
