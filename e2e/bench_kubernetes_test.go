package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/capstan-run/capstan/pkg/api"
)

// The kubernetes plugin's scenarios run on the test cluster of
// scripts/kube-deps.sh (scripts/bench starts it when one is selected, and
// kubetest.Kubeconfig otherwise): a real API server, scheduler and
// controller manager, kwok playing one node with the stages of
// tools/kube/kwok/stages (a Pod runs as soon as it is bound and ends after
// its KWOK_RUN_TIME, at once when unset). Each scenario has a namespace of
// its own and a stack of release builds whose executors are kubernetes
// ones with the services' defaults; the cluster's processes are measured
// with the stack (cpu: kube-apiserver, etcd, kwok, kube-scheduler,
// kube-controller-manager).

// kubeClusterProcs are the test cluster's processes, by their pid files in
// the folder of its kubeconfig.
var kubeClusterProcs = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"}

// kubeBenchStack starts a benchmark stack (benchStack, executors 1..n)
// whose executors run the kubernetes plugin in k's namespace, with env, and
// measures the cluster's processes with it.
func kubeBenchStack(b *testing.B, k *kubeNS, executors int, env ...string) *rig {
	b.Helper()
	env = append([]string{"CAPSTAN_KUBERNETES=true", "KUBECONFIG=" + k.kubeconfig, "CAPSTAN_KUBERNETES_NAMESPACE=" + k.ns,
		"CAPSTAN_CONTAINER_RUNTIME=none"}, env...)
	r := benchStack(b, executors, 100, env...) // the slots are CAPSTAN_KUBERNETES_MAX_PODS
	r.outside = map[string]int{}
	for _, name := range kubeClusterProcs {
		raw, err := os.ReadFile(filepath.Join(filepath.Dir(k.kubeconfig), name+".pid"))
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil && perr == nil {
			r.outside[name] = pid
		}
	}
	return r
}

// podTracker records, from an informer of its own on the namespace, when
// each Pod was first seen, first seen being deleted, and seen gone.
type podTracker struct {
	mu                      sync.Mutex
	added, deleting, goneAt map[string]time.Time
}

// track starts a podTracker on k's namespace, synced before it returns,
// until tb ends.
func (k *kubeNS) track(tb testing.TB) *podTracker {
	tb.Helper()
	p := &podTracker{added: map[string]time.Time{}, deleting: map[string]time.Time{}, goneAt: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(k.client, 0, informers.WithNamespace(k.ns))
	inf := f.Core().V1().Pods().Informer()
	seen := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			p.saw(pod, false)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				p.saw(pod, true)
			}
		}})
	if err != nil {
		tb.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	tb.Cleanup(func() { close(stop); f.Shutdown() })
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		tb.Fatal("the harness's Pod informer did not sync")
	}
	return p
}

func (p *podTracker) saw(pod *corev1.Pod, gone bool) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.added[pod.Name]; !ok {
		p.added[pod.Name] = now
	}
	if _, ok := p.deleting[pod.Name]; !ok && (gone || pod.DeletionTimestamp != nil) {
		p.deleting[pod.Name] = now
	}
	if gone {
		p.goneAt[pod.Name] = now
	}
}

// gone returns when Pod name was seen gone; ok is false while it was not.
func (p *podTracker) gone(name string) (at time.Time, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok = p.goneAt[name]
	return at, ok
}

// deletionSeen returns when Pod name was first seen being deleted (or
// gone).
func (p *podTracker) deletionSeen(name string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.deleting[name]
	return at, ok
}

// awaitGone waits, polling every millisecond, until every Pod of names was
// seen gone, at most timeout, and returns when the last went.
func (p *podTracker) awaitGone(tb testing.TB, names []string, timeout time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var last time.Time
		left := 0
		for _, n := range names {
			at, ok := p.gone(n)
			if !ok {
				left++
			}
			if at.After(last) {
				last = at
			}
		}
		if left == 0 {
			return last
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d Pods still in the API after %s", left, len(names), timeout)
		}
		<-time.After(time.Millisecond) // the polling interval
	}
}

// kubeRunning waits until the task of each run in names has a RUNNING
// attempt (its Pod Running), at most timeout, and returns each run's
// attempt id.
func kubeRunning(tb testing.TB, db *sql.DB, names []string, timeout time.Duration) map[string]int64 {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ids := map[string]int64{}
		rows, err := db.Query(`SELECT t.run_name, a.id FROM tasks t
			JOIN attempts a ON a.task_id = t.id AND a.number = t.attempt_count
			WHERE t.run_name = ANY($1) AND a.state = 3`, names)
		if err != nil {
			tb.Fatal(err)
		}
		for rows.Next() {
			var name string
			var id int64
			if err := rows.Scan(&name, &id); err != nil {
				tb.Fatal(err)
			}
			ids[name] = id
		}
		if err := rows.Close(); err != nil {
			tb.Fatal(err)
		}
		if len(ids) == len(names) {
			return ids
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d kubernetes tasks RUNNING after %s", len(ids), len(names), timeout)
		}
		<-time.After(20 * time.Millisecond) // the polling interval
	}
}

// kubeRuns creates n runs of spec named <prefix>-<i> and returns their
// names.
func kubeRuns(tb testing.TB, c *api.ClientWithResponses, prefix string, n int, spec api.WorkflowSpec) []string {
	tb.Helper()
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", prefix, i)
		if err := createRun(context.Background(), c, names[i], spec); err != nil {
			tb.Fatal(err)
		}
	}
	return names
}

// abortRunNow aborts run name through c; anything but 202 fails tb.
func abortRunNow(tb testing.TB, c *api.ClientWithResponses, name string) {
	tb.Helper()
	resp, err := c.AbortRunWithResponse(context.Background(), project, domain, name, api.AbortRequest{})
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode() != http.StatusAccepted {
		tb.Fatalf("abort %s: %d %s", name, resp.StatusCode(), resp.Body)
	}
}

// BenchmarkKubernetesThroughput measures how many single-task kubernetes
// runs one kubernetes executor completes per second when
// CAPSTAN_BENCH_KUBE_RUNS (1,000) are submitted as fast as the api takes
// them (as BenchmarkThroughput's single-task shape): each a Pod created,
// bound, Running and Succeeded at once (no KWOK_RUN_TIME), its log read and
// the Pod removed. The clock runs from the first submission to the last
// run's ended_at; pods_gone_s is until the last Pod left the API. Target ≥
// 100 runs/s.
func BenchmarkKubernetesThroughput(b *testing.B) {
	runs := envInt("CAPSTAN_BENCH_KUBE_RUNS", 1000)
	k := newKubeNS(b)
	r := kubeBenchStack(b, k, 1)
	pods := k.track(b)
	c := loadClient(b, r.Stack, 64)
	spec := api.WorkflowSpec{Steps: []api.Step{kubeStep("pod", nil)}}
	cpu := newCPUMeter(r)
	xacts := pgXacts(b, r.db)
	profiled := r.Profile(b, "kubernetes-throughput", envDuration("CAPSTAN_BENCH_PROFILE_TIME", 10*time.Second))
	start := time.Now()
	submit := submitAll(b, c, runs, "kt", spec)
	waitTasks(b, r.db, runs, 10*time.Minute)
	waitRuns(b, r.db, runs, 5*time.Minute)
	var last time.Time
	if err := r.db.QueryRow(`SELECT max(ended_at) FROM runs`).Scan(&last); err != nil {
		b.Fatal(err)
	}
	ids := attemptIDs(b, r.db)
	names := make([]string, 0, len(ids))
	for _, id := range ids {
		names = append(names, "capstan-"+strconv.FormatInt(id, 10))
	}
	podsGone := pods.awaitGone(b, names, 2*time.Minute)
	usage, wall := cpu.Stop(), time.Since(start)
	perRun := float64(pgXacts(b, r.db)-xacts) / float64(runs)
	profiled()
	elapsed := last.Sub(start)
	rate := float64(runs) / elapsed.Seconds()
	b.ReportMetric(rate, "runs/s")
	perRunCPU := kubeCPUPerRun(usage, wall, runs)
	report(b, "kubernetes_throughput", benchResult{Title: "Single-task kubernetes runs (Pod created, Running, Succeeded, removed)",
		Result: fmt.Sprintf("%.1f runs/s over %d runs (last Pod gone at %.1f s); CPU a run: cluster %.1f ms, Capstan %.1f ms",
			rate, runs, podsGone.Sub(start).Seconds(), perRunCPU["cluster"], perRunCPU["capstan"]),
		Target: "≥ 100 runs/s", Met: rate >= 100,
		Figures: map[string]any{"runs": runs, "executors": 1, "elapsed_s": round(elapsed.Seconds(), 3),
			"submit_s": round(submit.Seconds(), 3), "runs_per_s": round(rate, 1),
			"pods_gone_s": round(podsGone.Sub(start).Seconds(), 3), "pg_xacts_per_run": round(perRun, 1),
			"cpu_ms_per_run": perRunCPU, "cpu": usage, "peak_rss_mib": r.PeakRSS(),
			"settings": "service defaults (CAPSTAN_KUBERNETES_MAX_PODS 1000)", "extra_env": os.Getenv("CAPSTAN_BENCH_ENV")}})
}

// kubeCPUPerRun splits the CPU of usage (Stop's shares over wall) per run,
// in ms: "cluster" the test cluster's processes, "capstan" the stack's
// (services, Redis, Postgres backends), less sensitive to the host's load
// than the rate.
func kubeCPUPerRun(usage map[string]any, wall time.Duration, runs int) map[string]float64 {
	var cluster, capstan float64
	for name, v := range usage {
		f, ok := v.(float64)
		switch {
		case !ok || name == "harness" || name == "machine_busy" || name == "other_cores":
		case slices.Contains(kubeClusterProcs, name):
			cluster += f
		default:
			capstan += f
		}
	}
	per := wall.Seconds() * 1000 / float64(max(runs, 1))
	return map[string]float64{"cluster": round(cluster*per, 2), "capstan": round(capstan*per, 2)}
}

// attemptIDs lists the ids of the stack's attempts.
func attemptIDs(tb testing.TB, db *sql.DB) []int64 {
	tb.Helper()
	rows, err := db.Query(`SELECT id FROM attempts ORDER BY id`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return ids
}

// BenchmarkKubernetesAbort measures, over CAPSTAN_BENCH_KUBE_ABORTS (200)
// aborts, the time from the api's abort call on a run whose one kubernetes
// task is RUNNING (its Pod Running for an hour, KWOK_RUN_TIME) until its
// Pod is gone from the API, as a watch of the harness's own sees it; split
// at the moment the watch first sees the Pod being deleted (the executor's
// delete). Runs start 20 at a time on one kubernetes executor and are
// aborted one after another, each timed alone. Target p99 ≤ 1 s.
func BenchmarkKubernetesAbort(b *testing.B) {
	total := envInt("CAPSTAN_BENCH_KUBE_ABORTS", 200)
	const batch = 20
	k := newKubeNS(b)
	r := kubeBenchStack(b, k, 1)
	pods := k.track(b)
	c := loadClient(b, r.Stack, 8)
	spec := api.WorkflowSpec{Steps: []api.Step{kubeStep("long", map[string]string{"KWOK_RUN_TIME": "1h"})}}
	cpu := newCPUMeter(r)
	d := make([]time.Duration, 0, total)
	var toDelete []time.Duration
	for round := 0; len(d) < total; round++ {
		names := kubeRuns(b, c, fmt.Sprintf("kab-%d", round), min(batch, total-len(d)), spec)
		ids := kubeRunning(b, r.db, names, time.Minute)
		for _, name := range names {
			pod := "capstan-" + strconv.FormatInt(ids[name], 10)
			start := time.Now()
			abortRunNow(b, c, name)
			gone := pods.awaitGone(b, []string{pod}, 10*time.Second)
			d = append(d, gone.Sub(start))
			if at, ok := pods.deletionSeen(pod); ok {
				toDelete = append(toDelete, at.Sub(start))
			}
		}
	}
	usage := cpu.Stop()
	slices.Sort(d)
	slices.Sort(toDelete)
	p50, p99 := percentile(d, 50), percentile(d, 99)
	b.ReportMetric(ms(p99), "p99-ms")
	report(b, "kubernetes_abort", benchResult{Title: "Abort of a running Pod task (API call → Pod gone from the API)",
		Result: fmt.Sprintf("p50 %.0f ms, p99 %.0f ms over %d aborts (the executor's delete seen: p50 %.0f ms, p99 %.0f ms)",
			ms(p50), ms(p99), len(d), ms(percentile(toDelete, 50)), ms(percentile(toDelete, 99))),
		Target: "p99 ≤ 1 s", Met: p99 <= time.Second,
		Figures: map[string]any{"aborts": len(d), "p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(d[len(d)-1]),
			"min_ms": ms(d[0]), "delete_seen_p50_ms": ms(percentile(toDelete, 50)),
			"delete_seen_p99_ms": ms(percentile(toDelete, 99)), "kill_grace": "1s",
			"cpu": usage, "peak_rss_mib": r.PeakRSS()}})
}

// BenchmarkKubernetesOrphanSweep measures, over CAPSTAN_BENCH_KUBE_TRIALS
// (5) trials, how soon the orphan sweep deletes the Pods of a kubernetes
// executor killed -9 while CAPSTAN_BENCH_KUBE_ORPHANS (50) of its Pods ran
// (for an hour, KWOK_RUN_TIME). Each trial: the victim runs the Pods, a
// spare kubernetes executor starts, the victim is killed and the runs
// aborted at once, so their attempts end when the control plane declares
// the victim dead (the worker grace, default 5s) and no executor re-adopts
// them; the spare's sweep (every CAPSTAN_BENCH_KUBE_SWEEP, 5s, through
// CAPSTAN_KUBERNETES_SWEEP_INTERVAL) then deletes their Pods. The spare is
// the next trial's victim. The clock runs from the last of the attempts'
// finished_at (api) to the last Pod gone (the harness's watch): before that
// the Pods are not orphans yet, and how long that takes is the worker
// grace, what dead_worker_recovery measures; from_kill_* is from the kill.
// Target: every Pod gone ≤ 1 sweep period + 5 s after the attempts ended.
func BenchmarkKubernetesOrphanSweep(b *testing.B) {
	orphans := envInt("CAPSTAN_BENCH_KUBE_ORPHANS", 50)
	trials := envInt("CAPSTAN_BENCH_KUBE_TRIALS", 5)
	sweep := envDuration("CAPSTAN_BENCH_KUBE_SWEEP", 5*time.Second)
	k := newKubeNS(b)
	r := kubeBenchStack(b, k, 1, "CAPSTAN_KUBERNETES_SWEEP_INTERVAL="+sweep.String())
	pods := k.track(b)
	c := loadClient(b, r.Stack, 8)
	spec := api.WorkflowSpec{Steps: []api.Step{kubeStep("orphan", map[string]string{"KWOK_RUN_TIME": "1h"})}}
	cpu := newCPUMeter(r)
	var fromEnd, fromKill []time.Duration
	for victim := 1; victim <= trials; victim++ {
		names := kubeRuns(b, c, fmt.Sprintf("orphan-%d", victim), orphans, spec)
		ids := kubeRunning(b, r.db, names, 2*time.Minute)
		podNames := make([]string, 0, len(ids))
		attempts := make([]int64, 0, len(ids))
		for _, id := range ids {
			podNames = append(podNames, "capstan-"+strconv.FormatInt(id, 10))
			attempts = append(attempts, id)
		}
		r.StartExecutor(victim + 1)
		r.Eventually(15*time.Second, "the spare registered", func() bool { return r.AliveWorkers() >= 2 })
		r.Kill(fmt.Sprintf("executor-%d", victim))
		killed := time.Now()
		for _, name := range names {
			abortRunNow(b, c, name)
		}
		last := pods.awaitGone(b, podNames, sweep+time.Minute)
		ended := attemptsEnded(b, r.db, attempts)
		fromEnd = append(fromEnd, last.Sub(ended))
		fromKill = append(fromKill, last.Sub(killed))
		fmt.Printf("orphan sweep trial %d: %d Pods gone %s after their attempts ended, %s after the kill\n", victim,
			len(podNames), last.Sub(ended).Round(time.Millisecond), last.Sub(killed).Round(time.Millisecond))
	}
	usage := cpu.Stop()
	slices.Sort(fromEnd)
	slices.Sort(fromKill)
	worst := fromEnd[len(fromEnd)-1]
	b.ReportMetric(worst.Seconds(), "max-s")
	report(b, "kubernetes_orphan_sweep", benchResult{
		Title: fmt.Sprintf("Executor kill -9 with %d running Pods, not re-adopted (attempts ended → every orphan Pod deleted)", orphans),
		Result: fmt.Sprintf("p50 %.2f s, max %.2f s over %d trials, sweep every %s (from the kill: p50 %.2f s, max %.2f s)",
			percentile(fromEnd, 50).Seconds(), worst.Seconds(), trials, sweep, percentile(fromKill, 50).Seconds(),
			fromKill[len(fromKill)-1].Seconds()),
		Target: "≤ 1 sweep period + 5 s", Met: worst <= sweep+5*time.Second,
		Figures: map[string]any{"orphans": orphans, "trials": trials, "sweep_interval_s": sweep.Seconds(),
			"settings": "service defaults (heartbeat 1s, worker grace 5s) but CAPSTAN_KUBERNETES_SWEEP_INTERVAL",
			"p50_s":    round(percentile(fromEnd, 50).Seconds(), 3), "max_s": round(worst.Seconds(), 3),
			"from_kill_p50_s": round(percentile(fromKill, 50).Seconds(), 3),
			"from_kill_max_s": round(fromKill[len(fromKill)-1].Seconds(), 3),
			"cpu":             usage, "peak_rss_mib": r.PeakRSS()}})
}

// attemptsEnded waits until every attempt of ids has ended (at most a
// minute) and returns the last finished_at (api).
func attemptsEnded(tb testing.TB, db *sql.DB, ids []int64) time.Time {
	tb.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var open int
		var last sql.NullTime
		if err := db.QueryRow(`SELECT count(*) FILTER (WHERE finished_at IS NULL), max(finished_at) FROM attempts WHERE id = ANY($1)`,
			ids).Scan(&open, &last); err != nil {
			tb.Fatal(err)
		}
		if open == 0 && last.Valid {
			return last.Time
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d of %d attempts not ended after a minute", open, len(ids))
		}
		<-time.After(20 * time.Millisecond) // the polling interval
	}
}
