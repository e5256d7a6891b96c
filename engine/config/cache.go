package config

import (
	"fmt"
	"os"
	"path/filepath"
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
	for i, r := range c.ReverseProxy.Routes {
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
