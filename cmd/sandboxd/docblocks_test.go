package main

// TestDocBlocks runs every command block of README.md and docs/*.md, so a
// command the documentation shows is a command that works.
//
// What is run: every fenced block whose info string is sh, bash or console
// (of a console block, only the lines that start with "$ ", without it).
// Other blocks (json, go, plain text) are not run.
//
// Where: each file gets its own fresh clone of the repository in a temporary
// directory outside it (git clone of HEAD, with the working tree's
// uncommitted changes to tracked files applied, so a doc edit is tested
// before it is committed; nothing untracked or ignored is there: no bin/, no
// built guest). The file's blocks run in document order in one bash (its
// working directory the clone's root), so a cd, an exported variable, a file
// written or a background job of one block carries on to the next, as in the
// terminal of a reader who pastes them in turn. Each block runs under
// set -e -o pipefail with a timeout (blockTimeout): its first failing command
// fails it, and the file's later blocks are then not run. PATH starts with
// the sandboxd binary built from this tree; GOBIN is a temporary directory
// (go install and make install land there); XDG_CACHE_HOME is one the test
// made (sandboxd's compile and artifact caches; GOCACHE stays the caller's);
// KINDGI_PACK_SERVICE_TOKEN is unset; stdin is empty. Without bash, git,
// curl, make or wat2wasm the test skips, and under CI=true fails.
//
// Servers: a command line that ends in "&" (before an optional # comment) is
// a server started in the background. The test sends its stderr to a log and
// waits for its "listening" process event before the block's next line (a
// server that exits first, or does not listen within two minutes, fails the
// block); later blocks find it running, as a reader's curl would. The
// servers a file started are stopped (SIGTERM, then the shell's process group
// is killed) after its last block, unless a block stops them itself
// (kill %1; wait).
//
// Addresses: the documentation's loopback addresses are mapped to the
// test's. The port 8787 (the serve default) becomes a free loopback port,
// the same in every block of a file, and PORT is set to it, so a serve that
// names no address listens where it would on 8787; the registry localhost:5000 becomes a
// real registry (internal/registrytest, Debian's docker-registry) started
// for the file, so push, pull and serve --index oci://… blocks run against
// it.
//
// Markers: an HTML comment on the line right above a block's opening fence
// (blank lines between them allowed) says how to run it:
//
//	<!-- doc: fails [CODE] -->   an example of failure: the block must exit
//	                             non-zero (with CODE, exactly CODE); it runs
//	                             in a subshell, so its cd and variables do
//	                             not carry on.
//	<!-- doc: skip REASON -->    not run; REASON (required) says what it
//	                             needs that a test run lacks (a Kubernetes
//	                             cluster, a real remote registry, root and
//	                             the network). Each skip is a skipped
//	                             subtest with its reason, so make test lists
//	                             them; keep them rare.
//
// A marker with another word, a skip without a reason, or a marker above a
// block that is not run is an error. Under -short the test only parses the
// files and checks the markers (running them builds guests and starts
// servers).
//
// A block that fails prints the file and line, the block as run, its output
// and the stderr of the servers it started.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/registrytest"
	"github.com/sandboxd/sandboxd/internal/sandboxtest"
)

// blockTimeout bounds one block. It is generous: the slowest blocks
// compile the whole tree cold (make install's -trimpath, make image's
// CGO_ENABLED=0 build: about 2 minutes each at load 10), and a block that
// hits it (a server left in the foreground) fails anyway.
const blockTimeout = 8 * time.Minute

// docBlock is one command block of a documentation file.
type docBlock struct {
	file   string // relative to the repository root
	line   int    // of the opening fence, 1-based
	lang   string // sh, bash or console
	text   string // the commands (console: the "$ " lines, prompt removed)
	mode   string // "run", "fails" or "skip"
	reason string // of a skip
	code   int    // of a fails block that names its exit status; 0: any but 0
}

var docMarker = regexp.MustCompile(`^\s*<!--\s*doc:\s*(.*?)\s*-->\s*$`)

// parseDocBlocks returns the command blocks of a Markdown document, with
// the marker above each, or an error naming the line of a bad marker.
func parseDocBlocks(file string, src []byte) ([]docBlock, error) {
	lines := strings.Split(string(src), "\n")
	var blocks []docBlock
	var marker string // pending marker text
	markerLine := 0
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := docMarker.FindStringSubmatch(l); m != nil {
			if marker != "" {
				return nil, fmt.Errorf("%s:%d: a second doc marker before a block (the first is at line %d)", file, i+1, markerLine)
			}
			marker, markerLine = m[1], i+1
			if marker == "" {
				return nil, fmt.Errorf("%s:%d: empty doc marker (want fails or skip REASON)", file, i+1)
			}
			continue
		}
		if strings.Contains(l, "<!--") && strings.Contains(l, "doc:") {
			return nil, fmt.Errorf("%s:%d: a doc marker must be a line of its own: %q", file, i+1, l)
		}
		trimmed := strings.TrimSpace(l)
		if !strings.HasPrefix(trimmed, "```") {
			if marker != "" && trimmed != "" {
				return nil, fmt.Errorf("%s:%d: the doc marker is not right above a code block", file, markerLine)
			}
			continue
		}
		// An opening fence: read to its closing fence.
		indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
		info := strings.Fields(strings.TrimPrefix(trimmed, "```"))
		lang := ""
		if len(info) > 0 {
			lang = info[0]
		}
		start := i + 1
		var body []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if i == len(lines) {
			return nil, fmt.Errorf("%s:%d: code block not closed", file, start)
		}
		runnable := lang == "sh" || lang == "bash" || lang == "console"
		if !runnable {
			if marker != "" {
				return nil, fmt.Errorf("%s:%d: doc marker above a %q block, which is not run (only sh, bash and console are)", file, markerLine, lang)
			}
			continue
		}
		b := docBlock{file: file, line: start, lang: lang, mode: "run"}
		if lang == "console" {
			var cmds []string
			for _, c := range body {
				if strings.HasPrefix(c, "$ ") {
					cmds = append(cmds, strings.TrimPrefix(c, "$ "))
				}
			}
			body = cmds
		}
		b.text = strings.Join(body, "\n")
		if marker != "" {
			word, rest, _ := strings.Cut(marker, " ")
			switch word {
			case "fails":
				if rest = strings.TrimSpace(rest); rest != "" {
					code, err := strconv.Atoi(rest)
					if err != nil || code < 1 || code > 255 {
						return nil, fmt.Errorf("%s:%d: doc: fails takes an exit status from 1 to 255 or nothing (got %q)", file, markerLine, rest)
					}
					b.code = code
				}
				b.mode = "fails"
			case "skip":
				if b.reason = strings.TrimSpace(rest); b.reason == "" {
					return nil, fmt.Errorf("%s:%d: doc: skip needs a reason (what the block needs that a test run lacks)", file, markerLine)
				}
				b.mode = "skip"
			default:
				return nil, fmt.Errorf("%s:%d: unknown doc marker %q (want fails or skip REASON)", file, markerLine, word)
			}
			marker = ""
		}
		blocks = append(blocks, b)
	}
	if marker != "" {
		return nil, fmt.Errorf("%s:%d: doc marker with no code block after it", file, markerLine)
	}
	return blocks, nil
}

// docFiles are the documents whose blocks run: README.md and docs/*.md.
func docFiles(t *testing.T, root string) []string {
	t.Helper()
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(more)
	for _, f := range more {
		files = append(files, filepath.Join("docs", filepath.Base(f)))
	}
	return files
}

func TestDocBlocks(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	perFile := map[string][]docBlock{}
	files := docFiles(t, root)
	runs, skips := 0, 0
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseDocBlocks(f, src)
		if err != nil {
			t.Fatal(err)
		}
		perFile[f] = blocks
		for _, b := range blocks {
			if b.mode == "skip" {
				skips++
			} else {
				runs++
			}
		}
	}
	t.Logf("%d command blocks in %d files: %d to run, %d skipped by a doc: skip marker", runs+skips, len(files), runs, skips)
	if testing.Short() {
		t.Skip("-short: the doc blocks build guests and start servers; their markers were checked")
	}
	// What the blocks call besides sandboxd and go (the registry:
	// registrytest's own rule).
	if missing := missingPrograms([]string{"bash", "git", "curl", "make", "wat2wasm"}); len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the documentation's blocks need %s; CI=true requires it", strings.Join(missing, ", "))
		}
		t.Skipf("the documentation's blocks need %s (not installed)", strings.Join(missing, ", "))
	}
	bin := sandboxdBinary(t)
	work := t.TempDir()
	if strings.HasPrefix(work, root+string(filepath.Separator)) {
		t.Fatalf("the temporary directory %s is inside the repository", work)
	}
	goCache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	for _, f := range files {
		blocks := perFile[f]
		if len(blocks) == 0 {
			continue
		}
		t.Run(f, func(t *testing.T) {
			runDocFile(t, root, bin, filepath.Join(work, strings.ReplaceAll(f, "/", "_")), filepath.Join(work, "cache"), strings.TrimSpace(string(goCache)), blocks)
		})
	}
}

// cloneRepo clones root's HEAD into dir and applies the working tree's
// changes to tracked files (modified, added, deleted).
func cloneRepo(t *testing.T, root, dir string) {
	t.Helper()
	if out, err := exec.Command("git", "clone", "-q", root, dir).CombinedOutput(); err != nil {
		t.Fatalf("git clone %s: %v\n%s", root, err, out)
	}
	out, err := exec.Command("git", "-C", root, "diff", "HEAD", "--name-only", "--no-renames", "-z").Output()
	if err != nil {
		t.Fatalf("git diff HEAD: %v", err)
	}
	for _, p := range strings.Split(string(out), "\x00") {
		if p == "" {
			continue
		}
		src, dst := filepath.Join(root, p), filepath.Join(dir, p)
		b, err := os.ReadFile(src)
		if os.IsNotExist(err) {
			_ = os.Remove(dst)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(src)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// bgLine is a command line ending in "&" (not "&&"), before an optional
// comment: the command, and the comment.
var bgLine = regexp.MustCompile(`^(.*[^&\s])\s*&\s*(#.*)?$`)

// scriptFor is the block as the shell runs it: the mapped addresses, and
// each background command's stderr sent to a log it waits on.
func scriptFor(b docBlock, idx int, dir string, mapAddr func(string) string) (script string, logs []string) {
	var out []string
	for k, l := range strings.Split(mapAddr(b.text), "\n") {
		if m := bgLine.FindStringSubmatch(l); m != nil && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			log := filepath.Join(dir, fmt.Sprintf("bg.%d.%d.log", idx, k+1))
			logs = append(logs, log)
			l = fmt.Sprintf("%s 2>>%q & __doc_listening $! %q %s", m[1], log, log, m[2])
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n") + "\n", logs
}

// docDriver reads "INDEX MODE" lines on fd 8, runs block INDEX.sh, and
// answers "end INDEX STATUS" on fd 9. A run block's failing command exits
// the shell (set -e), which the test reads as that block's failure.
const docDriver = `
__doc_listening() {
	local i
	for i in $(seq 1 1200); do
		if grep -q '"kind":"listening"' "$2" 2>/dev/null; then return 0; fi
		if ! kill -0 "$1" 2>/dev/null; then
			echo "docblocks: the background command exited before its listening event; its stderr:" >&2
			cat "$2" >&2
			return 1
		fi
		sleep 0.1
	done
	echo "docblocks: no listening event from the background command in 120s; its stderr:" >&2
	cat "$2" >&2
	return 1
}
__doc_trap='echo "docblocks: exit status $? at line $LINENO of the block" >&2'
trap "$__doc_trap" ERR
set -o pipefail
while read -r __doc_i __doc_mode <&8; do
	case $__doc_mode in
	run)
		set -e
		. "$DOCBLOCKS_DIR/$__doc_i.sh" >"$DOCBLOCKS_DIR/$__doc_i.out" 2>&1 8<&- 9>&-
		set +e
		echo "end $__doc_i 0" >&9
		;;
	fails)
		trap - ERR
		( set -e; . "$DOCBLOCKS_DIR/$__doc_i.sh" ) >"$DOCBLOCKS_DIR/$__doc_i.out" 2>&1 8<&- 9>&-
		echo "end $__doc_i $?" >&9
		trap "$__doc_trap" ERR
		;;
	esac
done
__doc_jobs=$(jobs -p)
if [ -n "$__doc_jobs" ]; then kill $__doc_jobs 2>/dev/null; wait; fi
`

// runDocFile runs one file's blocks in one shell in a fresh clone at dir.
func runDocFile(t *testing.T, root, bin, dir, cache, goCache string, blocks []docBlock) {
	clone := filepath.Join(dir, "clone")
	state := filepath.Join(dir, "state")
	for _, d := range []string{state, filepath.Join(dir, "gobin"), cache} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cloneRepo(t, root, clone)

	// The addresses the file's blocks name, mapped to the test's.
	port := freeLoopbackPort(t)
	var registry string
	for _, b := range blocks {
		if b.mode != "skip" && strings.Contains(b.text, "localhost:5000") {
			registry = registrytest.Start(t).Host
			break
		}
	}
	mapAddr := func(s string) string {
		if registry != "" {
			s = strings.ReplaceAll(s, "localhost:5000", registry)
		}
		return strings.ReplaceAll(s, "8787", strconv.Itoa(port))
	}

	driver := filepath.Join(state, "driver.sh")
	if err := os.WriteFile(driver, []byte(docDriver), 0o644); err != nil {
		t.Fatal(err)
	}
	cmdR, cmdW, err := os.Pipe() // the test → the driver (fd 8)
	if err != nil {
		t.Fatal(err)
	}
	endR, endW, err := os.Pipe() // the driver → the test (fd 9)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "KINDGI_PACK_SERVICE_TOKEN", "PORT", "PATH", "GOBIN", "GOCACHE", "XDG_CACHE_HOME", "GOWORK", "DOCBLOCKS_DIR":
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GOBIN="+filepath.Join(dir, "gobin"),
		"GOCACHE="+goCache,      // XDG_CACHE_HOME moves, the Go build cache stays warm
		"XDG_CACHE_HOME="+cache, // sandboxd's caches: the test's, shared by its files
		"GOWORK=off",
		"DOCBLOCKS_DIR="+state,
		"PORT="+strconv.Itoa(port),
	)
	sh := exec.Command("bash", driver)
	sh.Dir, sh.Env = clone, env
	sh.ExtraFiles = []*os.File{nil, nil, nil, nil, nil, cmdR, endW} // fds 3..9: 8 and 9
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	shOut := &sandboxtest.Buffer{}
	sh.Stdout, sh.Stderr = shOut, shOut
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	cmdR.Close()
	endW.Close()
	exited := make(chan struct{})
	go func() { _ = sh.Wait(); close(exited) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmdW.Close() // the driver's read loop ends: it stops its jobs and exits
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
		}
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL) // anything left in the shell's process group
		<-exited
	}
	t.Cleanup(stop)

	ends := make(chan string)
	go func() {
		sc := bufio.NewScanner(endR)
		for sc.Scan() {
			ends <- sc.Text()
		}
		close(ends)
	}()

	failedAt := 0
	for i, b := range blocks {
		name := fmt.Sprintf("line_%d", b.line)
		t.Run(name, func(t *testing.T) {
			switch {
			case b.mode == "skip":
				t.Skipf("doc: skip %s", b.reason)
			case failedAt != 0:
				t.Skipf("not run: the block at line %d failed", failedAt)
			}
			script, logs := scriptFor(b, i, state, mapAddr)
			if err := os.WriteFile(filepath.Join(state, fmt.Sprintf("%d.sh", i)), []byte(script), 0o644); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if _, err := fmt.Fprintf(cmdW, "%d %s\n", i, b.mode); err != nil {
				failedAt = b.line
				t.Fatalf("%s:%d: the shell is gone: %v\n%s", b.file, b.line, err, shOut.String())
			}
			why := ""
			select {
			case l, ok := <-ends:
				switch {
				case !ok:
					why = "a command failed"
				case b.mode == "run" && l != fmt.Sprintf("end %d 0", i):
					why = "unexpected status: " + l
				case b.mode == "fails" && l == fmt.Sprintf("end %d 0", i):
					why = "it is marked doc: fails but exited 0"
				case b.mode == "fails" && b.code != 0 && l != fmt.Sprintf("end %d %d", i, b.code):
					why = fmt.Sprintf("it is marked doc: fails %d but ended with %q", b.code, l)
				}
			case <-time.After(blockTimeout):
				why = fmt.Sprintf("timed out after %v (a server in the foreground? end its line with & so the test waits for it to listen)", blockTimeout)
				_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
			}
			out, _ := os.ReadFile(filepath.Join(state, fmt.Sprintf("%d.out", i)))
			if why == "" {
				t.Logf("%s:%d: ok in %v; output:\n%s", b.file, b.line, time.Since(start).Round(time.Millisecond), clipLines(strings.TrimSpace(string(out)), 20))
				return
			}
			failedAt = b.line
			var bg strings.Builder
			for _, l := range logs {
				if s, err := os.ReadFile(l); err == nil {
					fmt.Fprintf(&bg, "--- stderr of the background command (%s):\n%s\n", filepath.Base(l), clipLines(strings.TrimSpace(string(s)), 60))
				}
			}
			t.Errorf("%s:%d: the %s block failed: %s (after %v)\n--- block, as run (in %s):\n%s--- output:\n%s\n%s",
				b.file, b.line, b.lang, why, time.Since(start).Round(time.Millisecond), clone, script,
				clipLines(strings.TrimSpace(string(out)), 80), bg.String())
		})
	}
	stop()
	if s := strings.TrimSpace(shOut.String()); s != "" && failedAt == 0 {
		t.Logf("shell output: %s", s)
	}
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestParseDocBlocks checks the marker rules on small documents.
func TestParseDocBlocks(t *testing.T) {
	ok := "# t\n\n```sh\necho a\n```\n\n<!-- doc: fails 2 -->\n```bash\nfalse\n```\n\n<!-- doc: skip needs a Kubernetes cluster -->\n\n```sh\nkubectl apply -k x\n```\n\n```json\n{}\n```\n\n```console\n$ sandboxd version\nv1\n$ echo b\n```\n"
	blocks, err := parseDocBlocks("ok.md", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	want := []docBlock{
		{file: "ok.md", line: 3, lang: "sh", text: "echo a", mode: "run"},
		{file: "ok.md", line: 8, lang: "bash", text: "false", mode: "fails", code: 2},
		{file: "ok.md", line: 14, lang: "sh", text: "kubectl apply -k x", mode: "skip", reason: "needs a Kubernetes cluster"},
		{file: "ok.md", line: 22, lang: "console", text: "sandboxd version\necho b", mode: "run"},
	}
	if fmt.Sprint(blocks) != fmt.Sprint(want) {
		t.Fatalf("got  %v\nwant %v", blocks, want)
	}
	for _, bad := range []struct{ doc, want string }{
		{"<!-- doc: skip -->\n```sh\nx\n```\n", "needs a reason"},
		{"<!-- doc: flaky -->\n```sh\nx\n```\n", `unknown doc marker "flaky"`},
		{"<!-- doc: fails soon -->\n```sh\nx\n```\n", "exit status from 1 to 255"},
		{"<!-- doc: fails -->\ntext\n```sh\nx\n```\n", "not right above a code block"},
		{"<!-- doc: fails -->\n```json\n{}\n```\n", "which is not run"},
		{"<!-- doc: fails -->\n", "no code block after it"},
		{"```sh\nx\n", "not closed"},
		{"<!-- doc: fails --> text\n```sh\nx\n```\n", "a line of its own"},
	} {
		if _, err := parseDocBlocks("bad.md", []byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: got %v, want an error containing %q", bad.doc, err, bad.want)
		}
	}
	// A background line gets its log and the wait; && and comments do not.
	b := docBlock{text: "a && b\nsandboxd serve --addr 127.0.0.1:8787 &   # bg\n# x &\ncurl 127.0.0.1:8787"}
	script, logs := scriptFor(b, 0, "/s", func(s string) string { return strings.ReplaceAll(s, "8787", "9") })
	if len(logs) != 1 || !strings.Contains(script, `sandboxd serve --addr 127.0.0.1:9 2>>"/s/bg.0.2.log" & __doc_listening $! "/s/bg.0.2.log" # bg`) ||
		!strings.Contains(script, "a && b\n") || !strings.Contains(script, "# x &\n") || !strings.Contains(script, "curl 127.0.0.1:9") {
		t.Fatalf("script:\n%s\nlogs %v", script, logs)
	}
}
