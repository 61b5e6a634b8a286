package executor

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/tetratelabs/wazero/api"

	"github.com/sandboxd/sandboxd/limits"
)

// imageMapMin is the smallest memory an image holds as a memfd; a smaller
// one is copied (a few microseconds) rather than mapped and faulted in.
const imageMapMin = inlineResetMax

// imageable reports whether t's instances may be loaded from an image.
func (t *reactorHandler) imageable() bool {
	return t.metered && t.verdict.Resettable && t.poolable() &&
		!t.cfg.deterministic && t.cfg.images
}

// hostWatch records whether an instance's _initialize may have changed its
// host state (keepState's condition for making an image of it): whether it
// made a WASI call that is not stateless (fuel.StatelessWASI) and did not
// fail before changing anything. The pass's dirty flag is coarser: it is
// set before every such call, and Go's runtime start-up calls
// fd_fdstat_set_flags(NONBLOCK) on fds 0-2, which wazero refuses (ENOSYS)
// for sandboxd's stdio without changing anything.
type hostWatch struct{ changed atomic.Bool }

type hostWatchKey struct{}

// watchHostState wraps the After hook of the state-changing WASI function
// name: under a context carrying a hostWatch, a call of it marks the watch,
// unless it is fd_fdstat_set_flags that returned an error (wazero's
// fdFdstatSetFlagsFn returns every error before it changes anything).
func watchHostState(name string, next func(context.Context, api.Module, []uint64)) func(context.Context, api.Module, []uint64) {
	failedNoChange := name == "fd_fdstat_set_flags"
	return func(ctx context.Context, mod api.Module, stack []uint64) {
		if w, ok := ctx.Value(hostWatchKey{}).(*hostWatch); ok {
			if !failedNoChange || len(stack) == 0 || uint32(stack[0]) == 0 {
				w.changed.Store(true)
			}
		}
		if next != nil {
			next(ctx, mod, stack)
		}
	}
}

// errClone stops an instance being loaded from the image; newInstance then
// instantiates it in full.
var errClone = errors.New("executor: the instance could not be loaded from its tool's image")

// clone loads mod, just instantiated and nothing of it run, from img.
func (t *reactorHandler) clone(in *instance, mod api.Module, img *state) error {
	s := bind(mod, t.verdict)
	if s == nil {
		return errClone
	}
	if img.memSize >= 0 {
		mem := memoryOf(mod)
		if mem == nil {
			return errClone
		}
		cur := int(mem.Size())
		if cur > img.memSize {
			return errClone
		}
		if cur < img.memSize {
			if _, ok := mem.Grow(uint32((img.memSize - cur) / limits.PageSize)); !ok {
				return errClone
			}
		}
	}
	in.mod = mod // load reads the memory through it
	// Without active data segments (none, or made passive: wasmCode.dataInit),
	// instantiation wrote nothing into memory: it is all zero, and copying
	// the image's non-zero chunks is the whole load — clearing the rest
	// would only fault in untouched pages (a few microseconds each here).
	if !in.load(img, s.globals, t.zeroMem) {
		return errClone
	}
	in.from = img
	s.dirty.Set(0)
	if t.recyclable() && t.grew.Load() < maxGrownResets {
		s.st = img
		in.snap, in.grew = s, &t.grew
	}
	t.cloned.Add(1)
	return nil
}

// keepState records what a newly initialised instance in (no env) is reset
// to, and offers its state as the tool's image when the tool has none and
// its _initialize changed no host state (watch; nil: not watched).
func (t *reactorHandler) keepState(in *instance, watch *hostWatch) {
	recycle := t.recyclable() && t.grew.Load() < maxGrownResets
	share := t.imageable()
	if !recycle && !share {
		return
	}
	s := bind(in.mod, t.verdict)
	if s == nil {
		return
	}
	clean := watch != nil && !watch.changed.Load() // _initialize changed no host state
	s.dirty.Set(0)
	if share && clean {
		if img := t.makeImage(in.mod, s, in); img != nil {
			in.from = img
			if recycle {
				s.st = img
				in.snap, in.grew = s, &t.grew
			}
			return
		}
	}
	if recycle {
		if s.st = capture(in.mod, s, false); s.st != nil {
			s.st.init, s.st.initKnown = in.init, in.initKnown
			s.own = true
			in.snap, in.grew = s, &t.grew
		}
	}
}

// makeImage makes mod's state the tool's image, unless the tool has one:
// it returns the tool's image (nil when none can be made).
func (t *reactorHandler) makeImage(mod api.Module, s *snapshot, in *instance) *state {
	t.imageMu.Lock()
	defer t.imageMu.Unlock()
	if img := t.image.Load(); img != nil {
		return img
	}
	if t.closed.Load() {
		return nil
	}
	img := capture(mod, s, true)
	if img != nil {
		img.init, img.initKnown = in.init, in.initKnown
		t.image.Store(img)
	}
	return img
}

// maxLearnt is how many calls a tool's working set is learnt from.
const maxLearnt = 64

// learn adds the pages one call wrote and read (seen, nil: not seen) to
// the working set that new instances of st's image make resident, while it
// is still learning and the set stays within what a reset keeps resident.
func (st *state) learn(seen *limits.WorkingSet) {
	if seen == nil || seen.Pages() == 0 || st.learnt.Add(1) > maxLearnt {
		return
	}
	for {
		cur := st.ws.Load()
		next := cur.Union(seen)
		if len(next.Write) > limits.KeepPagesMax || st.ws.CompareAndSwap(cur, next) {
			return
		}
	}
}

// learning reports whether st's working set is still being learnt.
func (st *state) learning() bool { return st.learnt.Load() < maxLearnt }

// learnFrom learns the working set of a call of in, an instance loaded
// from its tool's image that is being closed rather than reset (strict,
// or recycling off), while the tool is still learning it.
func (in *instance) learnFrom() {
	if st := in.from; st != nil && st.img != nil && st.learning() {
		st.learn(in.acct.ImageWorkingSet(st.img))
	}
}

// closeImage releases the tool's image once its instances are closed.
func (t *reactorHandler) closeImage() {
	t.imageMu.Lock()
	defer t.imageMu.Unlock()
	if img := t.image.Load(); img != nil {
		_ = img.img.Close()
	}
}
