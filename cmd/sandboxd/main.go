// Command sandboxd runs tool handlers compiled to WebAssembly inside a
// sandbox. See README.md for the commands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// stampedVersion is set at link time by make build / make install / make
// image: -ldflags "-X main.stampedVersion=$(git describe --tags --always --dirty)".
var stampedVersion string

// buildVersion is the version sandboxd reports: the link-time stamp, else
// the module version go install module@version records, else "devel-" and
// the VCS revision go build records from a checkout (with "-dirty" when the
// tree had uncommitted changes), else "dev".
func buildVersion(stamp string, bi *debug.BuildInfo, ok bool) string {
	if stamp != "" {
		return stamp
	}
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	if vcs := readVCS(bi); vcs.revision != "" {
		v := "devel-" + shortRev(vcs.revision)
		if vcs.modified {
			v += "-dirty"
		}
		return v
	}
	return "dev"
}

type vcsInfo struct {
	revision, time string
	modified       bool
}

func readVCS(bi *debug.BuildInfo) vcsInfo {
	var v vcsInfo
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.revision = s.Value
		case "vcs.time":
			v.time = s.Value
		case "vcs.modified":
			v.modified = s.Value == "true"
		}
	}
	return v
}

func shortRev(rev string) string {
	if len(rev) > 12 {
		return rev[:12]
	}
	return rev
}

// versionText is what sandboxd version prints: the version, the commit it
// was built from when the build recorded one, and the toolchain and
// platform.
func versionText(stamp string, bi *debug.BuildInfo, ok bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "sandboxd %s\n", buildVersion(stamp, bi, ok))
	if ok {
		if vcs := readVCS(bi); vcs.revision != "" {
			fmt.Fprintf(&b, "commit %s", vcs.revision)
			if vcs.time != "" {
				fmt.Fprintf(&b, " (%s)", vcs.time)
			}
			if vcs.modified {
				b.WriteString(", with uncommitted changes")
			}
			b.WriteString("\n")
		}
	}
	goVersion := runtime.Version()
	if ok && bi.GoVersion != "" {
		goVersion = bi.GoVersion
	}
	fmt.Fprintf(&b, "%s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}
