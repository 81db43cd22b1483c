package bench

import (
	"fmt"
	"runtime"
)

// memSplit is the process's memory in parts, in bytes: the Go runtime's
// figures and the kinds of resident page /proc/self/status counts.
type memSplit struct {
	heapAlloc, heapInuse, stackInuse, runtimeOther uint64
	rssAnon, rssFile, rssShmem                     uint64
}

func readMemSplit() memSplit {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSplit{heapAlloc: ms.HeapAlloc, heapInuse: ms.HeapInuse, stackInuse: ms.StackInuse,
		runtimeOther: ms.MSpanInuse + ms.MCacheInuse + ms.BuckHashSys + ms.GCSys + ms.OtherSys}
	if v, err := procBytes("/proc/self/status", "RssAnon", "RssFile", "RssShmem"); err == nil {
		s.rssAnon, s.rssFile, s.rssShmem = v[0], v[1], v[2]
	}
	return s
}

// per is what a has over b, per one of n held executions, in KiB.
func (a memSplit) per(b memSplit, n int) string {
	k := func(x, y uint64) float64 { return (float64(x) - float64(y)) / 1024 / float64(n) }
	return fmt.Sprintf("KiB per held: RssAnon %.1f (Go heap in use %.1f, live %.1f; goroutine stacks %.1f; runtime %.1f; the rest the guests' written pages), RssShmem %.1f (image pages read, once per instance), RssFile %.1f",
		k(a.rssAnon, b.rssAnon), k(a.heapInuse, b.heapInuse), k(a.heapAlloc, b.heapAlloc), k(a.stackInuse, b.stackInuse),
		k(a.runtimeOther, b.runtimeOther), k(a.rssShmem, b.rssShmem), k(a.rssFile, b.rssFile))
}
