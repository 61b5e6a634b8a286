package server_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
)

// rawOversize writes an invoke request with an over-limit body the way
// Python's urllib and requests do — headers and the whole body, all before
// reading a byte — then reads the status line.
func rawOversize(t *testing.T, addr string, size int, chunked bool) (status string, writeErr error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	framing := fmt.Sprintf("Content-Length: %d\r\n", size)
	if chunked {
		framing = "Transfer-Encoding: chunked\r\n"
	}
	w := bufio.NewWriterSize(c, 64<<10)
	fmt.Fprintf(w, "POST /v1/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nKindgi-Pack-Token: %s\r\n%s\r\n", token, framing)
	chunk := strings.Repeat(" ", 32<<10)
	for left := size; left > 0 && writeErr == nil; left -= len(chunk) {
		part := chunk[:min(len(chunk), left)]
		if chunked {
			fmt.Fprintf(w, "%x\r\n%s\r\n", len(part), part)
		} else {
			_, _ = w.WriteString(part)
		}
		writeErr = w.Flush()
	}
	if chunked && writeErr == nil {
		_, _ = w.WriteString("0\r\n\r\n")
		writeErr = w.Flush()
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "read: " + err.Error(), writeErr
	}
	return strings.TrimSpace(line), writeErr
}

// TestOversizeBodyWriteAllThenRead: a client that writes a whole body over
// MaxBodyBytes before it reads gets the 413 status line (not a connection
// reset), with a Content-Length or chunked; the discard holds no body
// budget. A client that claims a huge body and then stalls is answered
// within the discard's time bound.
func TestOversizeBodyWriteAllThenRead(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{})
	addr := strings.TrimPrefix(ts.url, "http://")
	for _, tc := range []struct {
		name    string
		size    int
		chunked bool
	}{
		{"content-length, 1 byte over", server.MaxBodyBytes + 1, false},
		{"content-length, 4 MiB over", server.MaxBodyBytes + 4<<20, false},
		{"content-length, 30 MiB", 30 << 20, false},
		{"chunked, 4 MiB over", server.MaxBodyBytes + 4<<20, true},
		{"chunked, 30 MiB", 30 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			status, werr := rawOversize(t, addr, tc.size, tc.chunked)
			t.Logf("%d-byte body: %q after %v (write error: %v)", tc.size, status, time.Since(start).Round(time.Millisecond), werr)
			if werr != nil || !strings.HasPrefix(status, "HTTP/1.1 413 ") {
				t.Fatalf("status line %q, write error %v", status, werr)
			}
			if inFlight, _ := ts.BodyBytes(); inFlight != 0 {
				t.Fatalf("%d body bytes still charged after the 413", inFlight)
			}
		})
	}

	// A claimed 1 GiB body that never comes: the 413 arrives after the
	// discard's time bound (2 s), not the body deadline (30 s).
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	begin := time.Now()
	fmt.Fprintf(c, "POST /v1/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nKindgi-Pack-Token: %s\r\nContent-Length: %d\r\n\r\n{", token, 1<<30)
	line, err := bufio.NewReader(c).ReadString('\n')
	took := time.Since(begin)
	t.Logf("stalled 1 GiB claim: %q after %v", strings.TrimSpace(line), took.Round(time.Millisecond))
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 413 ") || took > 10*time.Second {
		t.Fatalf("stalled writer: %q %v after %v", line, err, took)
	}
	if inFlight, _ := ts.BodyBytes(); inFlight != 0 {
		t.Fatalf("body budget in flight %d after the 413: the discard must hold none", inFlight)
	}
}
