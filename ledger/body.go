package ledger

import (
	"fmt"
	"reflect"
	"strings"
)

// A command kind is defined once: a body type with its methods (Kind,
// validate, check and optional traits) and its pointer field in Command,
// whose JSON name is the kind. Everything that depends on the kind (Kind,
// validation, Apply, the reports batch, WakesScheduler, LeaderOnly) looks
// the body up through the table below, derived from the Command struct, in
// the manner of Nomad's FSM LogAppliers.

// Body is the body of a command: what one kind carries and how it applies.
// Only the types of this package implement it.
type Body interface {
	// Kind is the body's kind, the JSON name of its field in Command.
	Kind() Kind
	// validate checks the body's shape, independent of any state.
	validate() *Error
	// check validates the body against l's state (every precondition of
	// applying it) without changing anything, and returns the change that
	// applies it, which cannot fail. c is the command carrying it (its
	// envelope). Apply runs the change at once; Ledger.Check discards it.
	check(l *Ledger, c *Command) (change, *Error)
}

// Optional traits of a body; a body without the method has the default.
// WakesScheduler asks them of a zero body of the kind, so their answer
// depends on the Result only, never on the body's fields.
type (
	// schedulerWaker says whether applying the body (res is what Apply
	// returned) may give the leader's policy something new to decide.
	// Default: it may.
	schedulerWaker interface{ wakesScheduler(res *Result) bool }
	// leaderOnlyBody: only the leader's own scheduling loop may propose
	// the body. Default: any member may.
	leaderOnlyBody interface{ leaderOnly() bool }
)

// WakesScheduler says whether an applied entry, whose Result is res, may
// give the leader's policy something new to decide, so that the leader
// runs a scheduling pass now rather than at its next tick. A rejected or
// skipped entry never does.
func WakesScheduler(res *Result) bool {
	if !res.Applied() {
		return false
	}
	if w, ok := commandBodies.zero(res.Kind).(schedulerWaker); ok {
		return w.wakesScheduler(res)
	}
	return true
}

// Body returns the command's body, nil when it has none or more than one.
func (c *Command) Body() Body {
	return commandBodies.body(reflect.ValueOf(c).Elem())
}

// Kind returns the kind of the command's body, or "" if it has none or more
// than one.
func (c *Command) Kind() Kind {
	if b := c.Body(); b != nil {
		return b.Kind()
	}
	return ""
}

// LeaderOnly says whether only the leader's own scheduling loop may propose
// c (decisions). The consensus layer refuses such a command from anyone
// else, the leader's forwarders included; the ledger cannot see leadership.
func (c *Command) LeaderOnly() bool {
	l, ok := c.Body().(leaderOnlyBody)
	return ok && l.leaderOnly()
}

// bodyFields is the table of a struct's body fields (Command's, or
// Report's for the kinds a reports batch carries). It is built once and
// never changed.
type bodyFields struct {
	typ reflect.Type
	// index holds the struct field index of each body field, in
	// declaration order; kinds and zeros the field's kind and a zero body.
	index []int
	kinds []Kind
	zeros []Body
	// byType and byKind map a body type and a kind to their position in
	// index.
	byType map[reflect.Type]int
	byKind map[Kind]int
}

var bodyType = reflect.TypeFor[Body]()

// commandBodies is the table of every command kind; reportBodies that of
// the kinds a reports batch may carry.
var (
	commandBodies = newBodyFields(reflect.TypeFor[Command]())
	reportBodies  = newBodyFields(reflect.TypeFor[Report]())
)

// newBodyFields takes every pointer field of struct t for a body field. It
// panics if one is not a Body, if a body's kind is not its field's JSON
// name, or if two fields carry one kind: programming errors that any test
// run catches.
func newBodyFields(t reflect.Type) *bodyFields {
	f := &bodyFields{typ: t, byType: map[reflect.Type]int{}, byKind: map[Kind]int{}}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if sf.Type.Kind() != reflect.Pointer {
			continue
		}
		if !sf.Type.Implements(bodyType) {
			panic(fmt.Sprintf("ledger: %s.%s is a pointer but %s is not a Body", t.Name(), sf.Name, sf.Type))
		}
		zero := reflect.New(sf.Type.Elem()).Interface().(Body)
		k := zero.Kind()
		if name, _, _ := strings.Cut(sf.Tag.Get("json"), ","); name != string(k) {
			panic(fmt.Sprintf("ledger: %s.%s is named %q in JSON but carries kind %q", t.Name(), sf.Name, name, k))
		}
		if _, dup := f.byKind[k]; dup {
			panic(fmt.Sprintf("ledger: %s carries kind %q twice", t.Name(), k))
		}
		f.byType[sf.Type] = len(f.index)
		f.byKind[k] = len(f.index)
		f.index = append(f.index, i)
		f.kinds = append(f.kinds, k)
		f.zeros = append(f.zeros, zero)
	}
	return f
}

// body returns the one body set in v, a struct of f's type; nil when none
// or several are.
func (f *bodyFields) body(v reflect.Value) Body {
	var found Body
	for _, i := range f.index {
		fv := v.Field(i)
		if fv.IsNil() {
			continue
		}
		if found != nil {
			return nil
		}
		found = fv.Interface().(Body)
	}
	return found
}

// zero is a zero body of kind k, nil if no field carries k. It is shared:
// callers only ask it for its traits.
func (f *bodyFields) zero(k Kind) Body {
	if i, ok := f.byKind[k]; ok {
		return f.zeros[i]
	}
	return nil
}

// set stores b in its field of v, a settable struct of f's type; false if
// no field takes b's type.
func (f *bodyFields) set(v reflect.Value, b Body) bool {
	i, ok := f.byType[reflect.TypeOf(b)]
	if ok {
		v.Field(f.index[i]).Set(reflect.ValueOf(b))
	}
	return ok
}

// kindList names f's kinds, for messages: "a, b, c".
func (f *bodyFields) kindList() string {
	names := make([]string, len(f.kinds))
	for i, k := range f.kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}
