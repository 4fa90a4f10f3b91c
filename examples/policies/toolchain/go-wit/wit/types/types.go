// Package types: WIT's option<T> and result<T, E> as the generated
// bindings read and write them, and as a policy builds its answers
// (Some, None, Ok, Err).
package types

// OptionTag says which case an Option holds.
type OptionTag uint8

const (
	OptionNone OptionTag = iota
	OptionSome
)

// Option is WIT's option<T>.
type Option[T any] struct {
	tag   OptionTag
	value T
}

// Some is an Option holding value.
func Some[T any](value T) Option[T] { return Option[T]{OptionSome, value} }

// None is an empty Option.
func None[T any]() Option[T] { return Option[T]{} }

// Tag says which case o holds.
func (o Option[T]) Tag() OptionTag { return o.tag }

// IsSome says whether o holds a value.
func (o Option[T]) IsSome() bool { return o.tag == OptionSome }

// Some is o's value; it panics on None.
func (o Option[T]) Some() T {
	if o.tag != OptionSome {
		panic("Some() of an empty Option")
	}
	return o.value
}

// Get is o's value and whether it holds one.
func (o Option[T]) Get() (T, bool) { return o.value, o.tag == OptionSome }

// ResultTag says which case a Result holds.
type ResultTag uint8

const (
	ResultOk ResultTag = iota
	ResultErr
)

// Result is WIT's result<T, E>.
type Result[T, E any] struct {
	tag ResultTag
	ok  T
	err E
}

// Ok is a successful Result.
func Ok[T, E any](value T) Result[T, E] { return Result[T, E]{tag: ResultOk, ok: value} }

// Err is a failed Result.
func Err[T, E any](err E) Result[T, E] { return Result[T, E]{tag: ResultErr, err: err} }

// Tag says which case r holds.
func (r Result[T, E]) Tag() ResultTag { return r.tag }

// Ok is r's value; it panics on an error.
func (r Result[T, E]) Ok() T {
	if r.tag != ResultOk {
		panic("Ok() of an error Result")
	}
	return r.ok
}

// Err is r's error; it panics on a value.
func (r Result[T, E]) Err() E {
	if r.tag != ResultErr {
		panic("Err() of a successful Result")
	}
	return r.err
}
