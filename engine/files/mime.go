package files

import (
	"path"
	"strings"
)

// contentTypes is the built-in table, the types nginx's mime.types and
// Go's mime package agree on for what a media host serves.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8", ".htm": "text/html; charset=utf-8",
	".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
	".mjs": "text/javascript; charset=utf-8", ".json": "application/json",
	".txt": "text/plain; charset=utf-8", ".md": "text/markdown; charset=utf-8",
	".csv": "text/csv; charset=utf-8", ".xml": "application/xml",
	".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
	".gif": "image/gif", ".webp": "image/webp", ".avif": "image/avif", ".ico": "image/vnd.microsoft.icon",
	".bmp": "image/bmp", ".tif": "image/tiff", ".tiff": "image/tiff",
	".mp4": "video/mp4", ".m4v": "video/mp4", ".webm": "video/webm", ".mkv": "video/x-matroska",
	".mov": "video/quicktime", ".avi": "video/x-msvideo", ".ts": "video/mp2t", ".m3u8": "application/vnd.apple.mpegurl",
	".mpd": "application/dash+xml", ".m4s": "video/iso.segment",
	".mp3": "audio/mpeg", ".m4a": "audio/mp4", ".aac": "audio/aac", ".ogg": "audio/ogg",
	".oga": "audio/ogg", ".opus": "audio/opus", ".flac": "audio/flac", ".wav": "audio/wav",
	".woff": "font/woff", ".woff2": "font/woff2", ".ttf": "font/ttf", ".otf": "font/otf",
	".pdf": "application/pdf", ".zip": "application/zip", ".gz": "application/gzip",
	".tgz": "application/gzip", ".bz2": "application/x-bzip2", ".xz": "application/x-xz",
	".zst": "application/zstd", ".br": "application/octet-stream", ".tar": "application/x-tar",
	".7z": "application/x-7z-compressed", ".iso": "application/x-iso9660-image",
	".deb": "application/vnd.debian.binary-package", ".rpm": "application/x-rpm",
	".wasm": "application/wasm", ".bin": "application/octet-stream",
	".safetensors": "application/octet-stream", ".gguf": "application/octet-stream",
	".onnx": "application/octet-stream", ".pt": "application/octet-stream",
	".parquet": "application/vnd.apache.parquet", ".img": "application/octet-stream",
	".qcow2": "application/octet-stream", ".sig": "application/pgp-signature",
	".asc": "application/pgp-signature", ".pem": "application/x-pem-file",
	".webmanifest": "application/manifest+json", ".atom": "application/atom+xml",
	".rss": "application/rss+xml", ".yaml": "application/yaml", ".yml": "application/yaml",
	".toml": "application/toml",
	// Also text a site serves and engine precompress compresses: tab
	// separated values (IANA, and Debian's /etc/mime.types), and
	// JavaScript source maps, JSON by their format (ECMA-426).
	".tsv": "text/tab-separated-values; charset=utf-8", ".map": "application/json",
}

// ContentType returns the media type for a file name by its extension,
// or application/octet-stream.
func ContentType(name string) string {
	ext := strings.ToLower(path.Ext(name))
	if t, ok := contentTypes[ext]; ok {
		return t
	}
	return "application/octet-stream"
}
