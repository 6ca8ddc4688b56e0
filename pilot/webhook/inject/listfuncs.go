package inject

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"text/template"
)

// appender is one request's list append for the templates. Sprig's append
// (push) copies the list each time, so the usual
// `{{ $l = append $l .Name }}` over a pod's containers (Istio's sidecar
// template does it) is quadratic in the containers. This one grows the
// list in place, doubling its capacity, when nothing was appended after
// the list's end yet; otherwise (the template keeps an older version of
// the list and appends to it again) it copies, so no list a template
// holds ever changes: sprig's semantics, linear cost. Each call also ends
// the rendering once the request's context is done.
type appender struct {
	ctx context.Context
	// used is, per backing array (its first element), the length of the
	// longest list handed out over it.
	used map[*any]int
	// copied counts the elements copied, for tests of the cost.
	copied int
}

func newAppender(ctx context.Context) *appender {
	return &appender{ctx: ctx, used: map[*any]int{}}
}

// funcs are the sprig list functions this appender replaces.
func (a *appender) funcs() template.FuncMap {
	must := func(list, v any) ([]any, error) { return a.append(list, v) }
	return template.FuncMap{"append": must, "push": must, "mustAppend": must, "mustPush": must}
}

func (a *appender) append(list, v any) ([]any, error) {
	if err := a.ctx.Err(); err != nil {
		return nil, err
	}
	if l, ok := list.([]any); ok && len(l) < cap(l) && len(l) > 0 {
		if head := &l[0]; a.used[head] == len(l) {
			a.used[head] = len(l) + 1
			return append(l, v), nil
		}
	}
	if list == nil {
		return nil, fmt.Errorf("cannot append to nil")
	}
	rv := reflect.ValueOf(list)
	if k := rv.Kind(); k != reflect.Slice && k != reflect.Array {
		return nil, fmt.Errorf("cannot append to type %s", rv.Type())
	}
	n := rv.Len()
	out := make([]any, n, max(2*n, 4))
	for i := range n {
		out[i] = rv.Index(i).Interface()
	}
	a.copied += n
	out = append(out, v)
	a.used[&out[0]] = n + 1
	return out, nil
}

// ctxWriter fails writes once ctx is done, which ends a template's
// execution with ctx's error.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
