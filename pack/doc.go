// Package pack reads the pack formats sandboxd serves and checks: a Kindgi
// pack index (index.json with a module root and an optional bundle map), a
// directory whose pack.json follows Kindgi's pack schema 1.1.0, and a
// directory of tool manifests. It owns the one rule by which a directory's
// manifests are found (Discover) and the synthesis that turns a guardrail
// check into an ordinary executor tool (Check).
//
// Reading a pack never compiles or runs anything: it yields tool manifests
// (and module bytes where the pack names them by path) for the executor
// to load. See docs/packs.md.
package pack
