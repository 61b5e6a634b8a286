package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"

	"github.com/sandboxd/sandboxd/internal/fuel"
	"github.com/sandboxd/sandboxd/internal/wasmbin"
	"github.com/sandboxd/sandboxd/toolerr"
)

// checkCompileBudget refuses, before anything else reads the module, a
// module whose function shapes would make wazero's compiler super-linear
// (F16: a 1.1 MB module took 56 s). The limits are wasmbin.DefaultBudget,
// derived from measurement; the message names the function and the limit.
func checkCompileBudget(bin []byte) error {
	if msg := notWasm(bin); msg != "" {
		return toolerr.New(toolerr.HandlerShapeInvalid, "%s", msg)
	}
	err := wasmbin.CheckBudget(bin, wasmbin.DefaultBudget)
	if err == nil {
		return nil
	}
	if errors.Is(err, wasmbin.ErrOverBudget) {
		return toolerr.Wrap(toolerr.HandlerShapeInvalid, err, "module refused before compilation")
	}
	return toolerr.Wrap(toolerr.HandlerShapeInvalid, err, "cannot read the module's code")
}

// compile compiles bin in r and returns when the compilation ends or when
// ctx is done, whichever comes first: wazero's CompileModule cannot be
// interrupted, so a process stopping (SIGTERM during boot, a reload, `run`)
// or a caller giving up must not wait for it. An abandoned compilation
// finishes in the background and its result is closed; the error is then
// ctx's (cancelled or deadline-exceeded).
//
// When it abandons a compilation, gaveUp is true: the background
// goroutine then owns r and closes it once the compiler is done with it
// (closing a runtime under a running compilation crashes wazero's engine:
// its module map is gone when the compiler stores the result), so the
// caller must not close r.
func (e *Executor) compile(ctx context.Context, r wazero.Runtime, bin []byte) (_ wazero.CompiledModule, gaveUp bool, _ error) {
	if err := ctx.Err(); err != nil {
		return nil, false, toolerr.As(err)
	}
	type result struct {
		cm  wazero.CompiledModule
		err error
	}
	done := make(chan result, 1)
	var abandoned = make(chan struct{})
	e.backgroundStart() // the goroutine uses the compilation cache's engine
	go func() {
		defer e.backgroundDone()
		// The compile must not see ctx's cancellation half way (wazero does
		// not honour it anyway); it runs to its end.
		cm, err := compileModule(context.WithoutCancel(ctx), r, bin)
		select {
		case <-abandoned:
			if cm != nil {
				_ = cm.Close(context.Background())
			}
			_ = r.Close(context.Background())
		default:
			done <- result{cm, err}
		}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			return nil, false, toolerr.Wrap(toolerr.HandlerShapeInvalid, res.err, "module does not compile")
		}
		return res.cm, false, nil
	case <-ctx.Done():
		close(abandoned)
		// The goroutine may have sent just before the close.
		select {
		case res := <-done:
			// The compiler finished just before: the caller closes r.
			if res.cm != nil {
				_ = res.cm.Close(context.Background())
			}
			return nil, false, toolerr.Wrap(toolerr.As(ctx.Err()).Code, ctx.Err(), "stopped waiting for the module to compile")
		default:
		}
		return nil, true, toolerr.Wrap(toolerr.As(ctx.Err()).Code, ctx.Err(), "stopped waiting for the module to compile")
	}
}

// compileModule is r.CompileModule with a panic of wazero's decoder,
// validator or compiler returned as an error: wazero v1.12 panics on some
// invalid modules instead of refusing them (its validator indexed the type
// list with a callee's unchecked type index: wasmbin.CheckBudget now
// refuses that module first), and a panic in this goroutine would end the
// whole process, every other tenant's calls with it.
func compileModule(ctx context.Context, r compiler, bin []byte) (cm wazero.CompiledModule, err error) {
	defer func() {
		if p := recover(); p != nil {
			cm, err = nil, fmt.Errorf("wazero failed on the module instead of refusing it (%v): the module is invalid or uses what wazero cannot compile", p)
		}
	}()
	return r.CompileModule(ctx, bin)
}

// CompileChecked compiles bin in r after the checks Load makes before
// anything reads a module: what is not a WebAssembly core module, and a
// module whose shapes would make wazero's compiler super-linear or that
// wazero would panic on, is refused with handler-shape-invalid; any other
// panic of wazero's comes back as an error. For callers that only validate
// a module (conformance's module check).
func CompileChecked(ctx context.Context, r wazero.Runtime, bin []byte) (wazero.CompiledModule, error) {
	if err := checkCompileBudget(bin); err != nil {
		return nil, err
	}
	return compileModule(ctx, r, bin)
}

// compiler is the part of wazero.Runtime that compileModule uses.
type compiler interface {
	CompileModule(ctx context.Context, bin []byte) (wazero.CompiledModule, error)
}

// instrumentUntilDone runs the fuel pass (through e.fuelCache) like compile: it
// returns when ctx is done even if the pass (linear, but seconds on a large
// module) is still running; the abandoned pass finishes in the background
// and fills the fuel cache.
func (e *Executor) instrumentUntilDone(ctx context.Context, bin []byte) ([]byte, fuel.Verdict, error, error) {
	type result struct {
		out     []byte
		verdict fuel.Verdict
		err     error
	}
	done := make(chan result, 1)
	go func() {
		out, v, err := e.fuelCache.Instrument(bin)
		done <- result{out, v, err}
	}()
	select {
	case r := <-done:
		return r.out, r.verdict, r.err, nil
	case <-ctx.Done():
		return nil, fuel.Verdict{}, nil, toolerr.Wrap(toolerr.As(ctx.Err()).Code, ctx.Err(), "stopped waiting for the module to be metered")
	}
}
