package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/executor"
	"github.com/sandboxd/sandboxd/server"
)

// countingListener counts the Write calls on the connections it accepts
// (each is one write syscall on a TCP connection).
type countingListener struct {
	net.Listener
	writes atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &l.writes}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// A 200 answer of /v1/invoke goes out in one write: the headers and the
// body together, with a Content-Length, not chunked (a flush before the
// handler returns used to switch net/http to chunked encoding, whose
// terminating chunk took a second write for every answer).
func TestInvokeAnswerIsOneWrite(t *testing.T) {
	srv, err := server.New(context.Background(), newExecutor(t, executor.NewConfig()),
		server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &countingListener{Listener: inner}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-done
		srv.Close(context.Background())
	}()

	conn, err := net.Dial("tcp", inner.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	const calls = 5
	for i := 0; i < calls; i++ {
		body := invokeBody("acme.echo", fmt.Sprintf(`{"message":"call %d %s"}`, i, strings.Repeat("y", i*300)))
		fmt.Fprintf(conn, "POST /v1/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nKindgi-Pack-Token: %s\r\nContent-Length: %d\r\n\r\n%s", token, len(body), body)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != 200 || !strings.Contains(string(b), fmt.Sprintf("call %d", i)) {
			t.Fatalf("call %d: %d %s", i, res.StatusCode, b)
		}
		if len(res.TransferEncoding) > 0 || res.ContentLength != int64(len(b)) {
			t.Fatalf("call %d: Transfer-Encoding %v, Content-Length %d for %d body bytes", i, res.TransferEncoding, res.ContentLength, len(b))
		}
		validate(t, "response", b)
	}
	conn.Close()
	// Anything the server still writes for these answers (a terminating
	// chunk) would be written by now.
	time.Sleep(100 * time.Millisecond)
	if n := ln.writes.Load(); n != calls {
		t.Fatalf("%d answers took %d writes, want one each", calls, n)
	}
}

// Concurrent calls of different tenants with inputs of very different sizes
// each get exactly their own output back: no buffer the server or the
// executor reuses between calls (answer buffers, pooled instances) carries
// bytes of one call into another's answer. A long answer written before a
// short one into a reused buffer would leave its tail behind; an instance
// reset that missed memory would echo an earlier input.
func TestAnswersCarryNothingOfOtherCalls(t *testing.T) {
	ts := start(t, server.StaticSource{Tools: []server.StaticTool{echoTool()}}, server.Options{MaxConcurrency: 8})
	const workers, perWorker = 6, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWorker; i++ {
				tenant := fmt.Sprintf("tenant-%d", w)
				// sizes alternate long and short, differently per worker
				n := ((i*7 + w*13) % 5) * 4000
				msg := fmt.Sprintf("%s#%d#%s#end", tenant, i, strings.Repeat(string(rune('a'+w)), n))
				body := fmt.Sprintf(`{"v":2,"kind":"invoke","tool":{"id":"acme.echo"},"input":{"message":%q},"ctx":{"tenantId":%q,"runId":"r%d"}}`, msg, tenant, i)
				r, err := do(t, context.Background(), http.MethodPost, ts.url+"/v1/invoke", strings.NewReader(body), authJSON())
				if err != nil {
					errs <- err
					return
				}
				// json.Unmarshal refuses trailing bytes: a leftover tail
				// of a longer answer fails here.
				var res struct {
					Output map[string]any `json:"output"`
				}
				if r.status != 200 || json.Unmarshal(r.body, &res) != nil || res.Output["echo"] != msg {
					errs <- fmt.Errorf("%s call %d: got %d %.300q…, want the echo of %.100q…", tenant, i, r.status, r.body, msg)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
