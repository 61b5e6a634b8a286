// Package examples holds example sandboxd handlers, with their sources, tool
// manifests, sample inputs and built modules; it embeds the echo example so
// that the CLI can run it when given no manifest.
package examples
