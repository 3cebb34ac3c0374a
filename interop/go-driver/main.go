// pcg-driver: a thin command-line wrapper around orbit.go/pcgroups v0.2.2, used by
// the interop tests to drive the Go reference against the same nats-server as the
// TypeScript port. It only calls the public pcgroups API; it holds no logic of its own.
//
//	pcg-driver <server-url> <command> [args...]
//
// JSON arguments are decoded with encoding/json into the pcgroups types, so "null"
// gives a nil slice and "[]" an empty one, exactly as a Go caller would pass them.
// Admin commands print one JSON value; on failure {"error": "..."} and exit 1.
// consume-* prints one NDJSON line per handled message, {"event":"started"} once
// joined, and ends with {"event":"stopped"} (SIGTERM), {"event":"done"} (config
// deleted) or {"event":"error","error":...} with exit 1 when Done returns an error.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/pcgroups"
)

var outMu sync.Mutex

func emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	outMu.Lock()
	defer outMu.Unlock()
	os.Stdout.Write(append(b, '\n'))
}

// raw prints bytes that already are JSON (Go's own marshalling of a pcgroups value).
func raw(v any) {
	b, err := json.Marshal(v)
	check(err)
	os.Stdout.Write(append(b, '\n'))
}

func check(err error) {
	if err != nil {
		emit(map[string]string{"error": err.Error()})
		os.Exit(1)
	}
}

func decode[T any](arg string) T {
	var v T
	check(json.Unmarshal([]byte(arg), &v))
	return v
}

func num(arg string) int64 {
	n, err := strconv.ParseInt(arg, 10, 64)
	check(err)
	return n
}

func need(args []string, n int, usage string) {
	if len(args) < n {
		check(fmt.Errorf("usage: pcg-driver <url> %s", usage))
	}
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: pcg-driver <server-url> <command> [args...]")
		os.Exit(2)
	}
	nc, err := nats.Connect(os.Args[1], nats.Name("pcg-driver"))
	check(err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	check(err)
	cmd, a := os.Args[2], os.Args[3:]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	switch cmd {
	case "create-static":
		need(a, 6, "create-static <stream> <group> <max> <members-json> <mappings-json> <filters-json>")
		c, err := pcgroups.CreateStatic(ctx, js, a[0], a[1], uint(num(a[2])), decode[[]string](a[5]), decode[[]string](a[3]), decode[[]pcgroups.MemberMapping](a[4]))
		check(err)
		raw(c)
	case "create-elastic":
		need(a, 6, "create-elastic <stream> <group> <max> <partitioning-filters-json> <max-buffered-msgs> <max-buffered-bytes>")
		c, err := pcgroups.CreateElastic(ctx, js, a[0], a[1], uint(num(a[2])), decode[[]pcgroups.PartitioningFilter](a[3]), num(a[4]), num(a[5]))
		check(err)
		raw(c)
	case "get-static":
		need(a, 2, "get-static <stream> <group>")
		c, err := pcgroups.GetStaticConsumerGroupConfig(ctx, js, a[0], a[1])
		check(err)
		raw(c)
	case "get-elastic":
		need(a, 2, "get-elastic <stream> <group>")
		c, err := pcgroups.GetElasticConsumerGroupConfig(ctx, js, a[0], a[1])
		check(err)
		raw(c)
	case "add", "drop":
		need(a, 3, cmd+" <stream> <group> <members-json>")
		f := pcgroups.AddMembers
		if cmd == "drop" {
			f = pcgroups.DeleteMembers
		}
		members, err := f(ctx, js, a[0], a[1], decode[[]string](a[2]))
		check(err)
		raw(members)
	case "set-mappings":
		need(a, 3, "set-mappings <stream> <group> <mappings-json>")
		check(pcgroups.SetMemberMappings(ctx, js, a[0], a[1], decode[[]pcgroups.MemberMapping](a[2])))
		emit(map[string]bool{"ok": true})
	case "delete-mappings":
		need(a, 2, "delete-mappings <stream> <group>")
		check(pcgroups.DeleteMemberMappings(ctx, js, a[0], a[1]))
		emit(map[string]bool{"ok": true})
	case "delete-static", "delete-elastic":
		need(a, 2, cmd+" <stream> <group>")
		f := pcgroups.DeleteStatic
		if cmd == "delete-elastic" {
			f = pcgroups.DeleteElastic
		}
		check(f(ctx, js, a[0], a[1]))
		emit(map[string]bool{"ok": true})
	case "step-down-static", "step-down-elastic":
		need(a, 3, cmd+" <stream> <group> <member>")
		f := pcgroups.StaticMemberStepDown
		if cmd == "step-down-elastic" {
			f = pcgroups.ElasticMemberStepDown
		}
		check(f(ctx, js, a[0], a[1], a[2]))
		emit(map[string]bool{"ok": true})
	case "partition-filters":
		// Go's GeneratePartitionFilters over the stored config's filters, for each member given.
		need(a, 4, "partition-filters <static|elastic> <stream> <group> <members-json>")
		out := map[string][]string{}
		for _, m := range decode[[]string](a[3]) {
			out[m] = []string{}
			if a[0] == "elastic" {
				c, err := pcgroups.GetElasticConsumerGroupConfig(ctx, js, a[1], a[2])
				check(err)
				out[m] = append(out[m], pcgroups.ElasticGetPartitionFilters(*c, m)...)
				continue
			}
			c, err := pcgroups.GetStaticConsumerGroupConfig(ctx, js, a[1], a[2])
			check(err)
			filters := c.Filters
			if len(filters) == 0 {
				filters = []string{">"}
			}
			for _, f := range filters {
				out[m] = append(out[m], pcgroups.GeneratePartitionFilters(c.Members, c.MaxMembers, c.MemberMappings, m, f)...)
			}
		}
		raw(out)
	case "consume-static", "consume-elastic":
		need(a, 5, cmd+" <stream> <group> <member> <ackwait-ms> <max-ack-pending> [sleep-ms]")
		cancel()
		consume(js, cmd == "consume-static", a)
	case "bench-static":
		need(a, 5, cmd+" <stream> <group> <member> <ackwait-ms> <max-ack-pending> [target]")
		cancel()
		bench(js, a)
	default:
		check(fmt.Errorf("unknown command %q", cmd))
	}
}

// bench is a member for the benchmarks: a no-op handler that acks, reporting in the
// benchmark's JSON lines (ready, first, count every 100 ms) instead of one line per message.
func bench(js jetstream.JetStream, a []string) {
	template := jetstream.ConsumerConfig{
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Duration(num(a[3])) * time.Millisecond,
		MaxAckPending: int(num(a[4])),
	}
	var handled atomic.Int64
	now := func() float64 { return float64(time.Now().UnixNano()) / 1e6 }
	var target int64
	if len(a) > 5 {
		target = num(a[5])
	}
	handler := func(msg jetstream.Msg) {
		n := handled.Add(1)
		if n == 1 {
			emit(map[string]any{"ev": "first", "at": now()})
		}
		_ = msg.Ack()
		if n == target {
			emit(map[string]any{"ev": "done", "n": n, "at": now()})
		}
	}
	cc, err := pcgroups.StaticConsume(context.Background(), js, a[0], a[1], a[2], handler, template)
	check(err)
	emit(map[string]string{"ev": "ready"})
	ticker := time.NewTicker(100 * time.Millisecond)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	for {
		select {
		case <-ticker.C:
			emit(map[string]any{"ev": "count", "n": handled.Load(), "at": now()})
		case <-signals:
			cc.Stop()
			emit(map[string]any{"ev": "stopped", "n": handled.Load()})
			return
		}
	}
}

func consume(js jetstream.JetStream, static bool, a []string) {
	stream, group, member := a[0], a[1], a[2]
	template := jetstream.ConsumerConfig{
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Duration(num(a[3])) * time.Millisecond,
		MaxAckPending: int(num(a[4])),
	}
	var sleep time.Duration
	if len(a) > 5 {
		sleep = time.Duration(num(a[5])) * time.Millisecond
	}
	// The stream the member's consumer reads (the work-queue stream for elastic groups),
	// to look up a message's stored subject, whose first token is its partition.
	consumerStream := stream
	if !static {
		consumerStream = stream + "-" + group
	}
	s, err := js.Stream(context.Background(), consumerStream)
	check(err)

	handler := func(msg jetstream.Msg) {
		line := map[string]any{"subject": msg.Subject(), "payload": string(msg.Data()), "pin_id": msg.Headers().Get("Nats-Pin-Id"), "member": member, "partition": -1}
		if md, err := msg.Metadata(); err == nil {
			line["seq"] = md.Sequence.Stream
			line["delivered"] = md.NumDelivered
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if stored, err := s.GetMsg(ctx, md.Sequence.Stream); err == nil {
				if p, err := strconv.Atoi(strings.SplitN(stored.Subject, ".", 2)[0]); err == nil {
					line["partition"] = p
				}
			}
			cancel()
		}
		if sleep > 0 {
			time.Sleep(sleep)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := msg.DoubleAck(ctx); err != nil {
			line["ack_error"] = err.Error()
		}
		emit(line)
	}

	f := pcgroups.ElasticConsume
	if static {
		f = pcgroups.StaticConsume
	}
	cc, err := f(context.Background(), js, stream, group, member, handler, template)
	check(err)
	emit(map[string]string{"event": "started"})

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-signals:
		cc.Stop()
		select {
		case err = <-cc.Done():
		case <-time.After(5 * time.Second):
		}
		emit(map[string]string{"event": "stopped"})
	case err = <-cc.Done():
		if err != nil {
			emit(map[string]string{"event": "error", "error": err.Error()})
			os.Exit(1)
		}
		emit(map[string]string{"event": "done"})
	}
}
