package artifact

import (
	"os"
	"sort"
	"time"

	"github.com/sandboxd/sandboxd/toolerr"
)

// CachedBlob is one blob of the artifact cache.
type CachedBlob struct {
	Digest string    `json:"digest"`
	Size   int64     `json:"size"`
	Used   time.Time `json:"used"` // last written or read (refreshed at most hourly)
}

// touchEvery is how stale a blob's mtime may get before a read refreshes
// it: the mtime is the "last used" time Prune evicts by.
const touchEvery = time.Hour

// CacheList lists the blobs of the artifact cache in dir, least recently
// used first.
func CacheList(dir string) ([]CachedBlob, error) {
	c, err := openCache(dir, false)
	if err != nil {
		return nil, err
	}
	out := []CachedBlob{}
	for _, alg := range digestAlgs {
		ents, err := os.ReadDir(c.dir("blobs", alg))
		if err != nil {
			return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot read the artifact cache")
		}
		for _, e := range ents {
			info, err := e.Info()
			if err != nil || !info.Mode().IsRegular() || checkDigest(alg+":"+e.Name()) != nil {
				continue
			}
			out = append(out, CachedBlob{Digest: alg + ":" + e.Name(), Size: info.Size(), Used: info.ModTime()})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Used.Before(out[j].Used) })
	return out, nil
}

// CachePrune evicts from the artifact cache in dir the blobs unused for
// longer than olderThan (0: no age limit), then the least recently used
// until the cache holds at most maxBytes (< 0: no size limit). Memos of
// where modules sit inside images are dropped with their manifests. It
// returns what it removed. Other processes may use the cache meanwhile: a
// blob removed under them is fetched again.
func CachePrune(dir string, olderThan time.Duration, maxBytes int64) ([]CachedBlob, error) {
	blobs, err := CacheList(dir)
	if err != nil {
		return nil, err
	}
	c, _ := openCache(dir, false)
	var total int64
	for _, b := range blobs {
		total += b.Size
	}
	removed := []CachedBlob{}
	now := time.Now()
	for _, b := range blobs { // least recently used first
		old := olderThan > 0 && now.Sub(b.Used) > olderThan
		big := maxBytes >= 0 && total > maxBytes
		if !old && !big {
			continue
		}
		if err := os.Remove(c.blobPath(b.Digest)); err != nil && !os.IsNotExist(err) {
			return removed, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot prune the artifact cache")
		}
		alg, hexPart := digestParts(b.Digest)
		_ = os.RemoveAll(c.dir("modules", alg, hexPart))
		total -= b.Size
		removed = append(removed, b)
	}
	c.sweep(24 * time.Hour)
	return removed, nil
}

// touch refreshes a blob's last-used time when it is stale.
func touch(p string, mtime time.Time) {
	if time.Since(mtime) > touchEvery {
		now := time.Now()
		_ = os.Chtimes(p, now, now)
	}
}
