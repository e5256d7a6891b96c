package config

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/mediaship/engine/integrity"
)

// Cache is [cache]: where the edge cache keeps the objects of the proxy
// routes that set cache = true, and how much of the disk it may use.
type Cache struct {
	// Path is the directory of the objects; created when missing. It
	// must be set for any route to cache.
	Path string `toml:"path"`
	// MaxSize bounds the bytes of all objects; past it the least
	// recently used are removed. Zero means no bound but MinFree.
	MaxSize Size `toml:"max_size"`
	// MinFree is the free space kept on Path's file system; an object
	// that would leave less is not stored. Zero means 1 GiB.
	MinFree Size `toml:"min_free"`
	// MaxFills bounds the objects fetched into the cache at once (each
	// an origin connection and a file growing, going on when its clients
	// leave); past it a miss is relayed to the origin and not stored.
	// Zero means 256.
	MaxFills int `toml:"max_fills"`
	// DefaultTTL is how long a response that states no freshness of its
	// own (no Cache-Control max-age or s-maxage, no Expires) is served
	// from the cache. Zero stores no such response.
	DefaultTTL Duration `toml:"default_ttl"`
}

// CacheOn reports whether any proxy route caches.
func (c *Config) CacheOn() bool {
	if !c.ProxyOn() {
		return false
	}
	for _, r := range c.ReverseProxy.Routes {
		if r.Cache {
			return true
		}
	}
	return false
}

func (c *Config) validateCache(errs *Errors) {
	k := &c.Cache
	if k.MinFree == 0 {
		k.MinFree = 1 << 30
	}
	if k.MaxFills == 0 {
		k.MaxFills = 256
	}
	if k.MaxFills < 0 {
		errs.add(c.errAt("cache.max_fills", "must be positive; the default is 256"))
	}
	if k.MaxSize < 0 {
		errs.add(c.errAt("cache.max_size", "must not be negative; \"0\" means no bound but min_free"))
	}
	if k.MinFree < 0 {
		errs.add(c.errAt("cache.min_free", "must not be negative"))
	}
	if k.DefaultTTL < 0 {
		errs.add(c.errAt("cache.default_ttl", "must not be negative; \"0s\" stores no response without freshness of its own"))
	}
	if k.Path != "" {
		k.Path = c.resolvePath("cache.path", k.Path)
		if fi, err := os.Stat(k.Path); err == nil && !fi.IsDir() {
			errs.add(c.errAt("cache.path", "%q is a file; expected a directory for the cache's objects", k.Path))
		} else if err != nil && !os.IsNotExist(err) {
			errs.add(c.errAt("cache.path", "cannot use %q: %v", k.Path, unwrapPathError(err)))
		} else if err != nil {
			if _, perr := os.Stat(filepath.Dir(k.Path)); perr != nil {
				errs.add(c.errAt("cache.path", "%q does not exist, nor does the directory it would be made in", k.Path))
			}
		}
	}
	for i := range c.ReverseProxy.Routes {
		r := &c.ReverseProxy.Routes[i]
		c.validateOrigin(fmt.Sprintf("reverse_proxy.routes[%d]", i), r, errs)
		if r.CacheManifest != "" {
			key := fmt.Sprintf("reverse_proxy.routes[%d].cache_manifest", i)
			r.CacheManifest = c.resolvePath(key, r.CacheManifest)
			if !r.Cache {
				errs.add(c.errAt(key, "is for a cached route; set cache = true too, or remove it"))
			} else if _, err := LoadManifest(r.CacheManifest); err != nil {
				errs.add(c.errAt(key, "%v", err))
			}
		}
		if !r.Cache {
			continue
		}
		key := fmt.Sprintf("reverse_proxy.routes[%d].cache", i)
		switch {
		case r.Passthrough:
			errs.add(c.errAt(key, "has no meaning on a passthrough route (tls_termination = false): its bytes are relayed still encrypted"))
		case k.Path == "":
			errs.add(c.errAt(key, "true, but [cache] path is not set; set it to the directory for the cached objects (such as \"/var/cache/engine\")"))
		}
	}
}

// LoadManifest reads a route's cache_manifest: BLAKE3 digests by path.
func LoadManifest(path string) (map[string]integrity.Digest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read %q: %v", path, unwrapPathError(err))
	}
	defer f.Close()
	entries, err := integrity.ReadManifest(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	m := make(map[string]integrity.Digest, len(entries))
	for _, e := range entries {
		m[e.Path] = e.Digest
	}
	return m, nil
}

// validateOrigin checks a route's origin keys: an S3 origin's bucket,
// region and credentials.
func (c *Config) validateOrigin(key string, r *Route, errs *Errors) {
	switch r.Origin {
	case "", "http":
		for _, k := range []struct{ name, v string }{{"s3_bucket", r.S3Bucket}, {"s3_region", r.S3Region}, {"s3_credentials", r.S3Credentials}} {
			if k.v != "" {
				errs.add(c.errAt(key+"."+k.name, "is for an S3 origin; set origin = \"s3\" too, or remove it"))
			}
		}
		return
	case "s3":
	default:
		errs.add(c.errAt(key+".origin", "unknown origin %q; expected \"http\" (web servers, the default) or \"s3\" (an S3-compatible object store)", r.Origin))
		return
	}
	switch {
	case r.Passthrough:
		errs.add(c.errAt(key+".origin", "\"s3\" has no meaning on a passthrough route (tls_termination = false)"))
	case !r.Cache:
		errs.add(c.errAt(key+".origin", "\"s3\" needs cache = true on the route: the engine reaches an object store through the edge cache, which signs its requests"))
	}
	if !validBucket(r.S3Bucket) {
		errs.add(c.errAt(key+".s3_bucket", "%q is not a bucket name: 3 to 63 lower-case letters, digits, dots and hyphens, such as \"models\"", r.S3Bucket))
	}
	if r.S3Region == "" {
		r.S3Region = "us-east-1"
	}
	if r.S3Credentials != "" {
		r.S3Credentials = c.resolvePath(key+".s3_credentials", r.S3Credentials)
		if fi, err := os.Stat(r.S3Credentials); err != nil {
			errs.add(c.errAt(key+".s3_credentials", "cannot read %q: %v", r.S3Credentials, unwrapPathError(err)))
		} else if fi.Mode().Perm()&0o077 != 0 {
			errs.add(c.errAt(key+".s3_credentials", "%q can be read by other users (mode %04o); it holds a secret key: chmod 600 it", r.S3Credentials, fi.Mode().Perm()))
		}
	} else if os.Getenv("AWS_ACCESS_KEY_ID") == "" || os.Getenv("AWS_SECRET_ACCESS_KEY") == "" {
		errs.add(c.errAt(key+".origin", "\"s3\" without s3_credentials takes its keys from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and they are not set; set them, or name a credentials file in s3_credentials"))
	}
}

// validBucket reports whether b is an S3 bucket name that works in a
// path-style URL.
func validBucket(b string) bool {
	if len(b) < 3 || len(b) > 63 {
		return false
	}
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '.' || c == '-':
			if i == 0 || i == len(b)-1 {
				return false
			}
		default:
			return false
		}
	}
	return true
}
