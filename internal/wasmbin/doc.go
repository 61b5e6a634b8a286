// Package wasmbin is sandboxd's one reader of WebAssembly binaries, read as
// wazero v1.12 reads them: LEB128 integers, names, value types and limits
// (Reader), and instruction streams (ScanExpr), which internal/fuel reads
// too before it rewrites them. On top of it, it reads the parts of a
// binary that sandboxd checks before it instantiates a module and that
// wazero's public API does not expose (every import, including tables and
// globals, and table limits: Parse), bounds what compiling a module may
// cost (CheckBudget), caps tables (LimitTables) and rewrites data segments
// (MergeData, PassiveData).
//
// It is a reader, not a validator: what it accepts is for wazero to
// validate. It never panics on malformed input.
//
// # Reading as wazero does
//
// A reader that disagrees with wazero about where an instruction ends can
// be shown one instruction stream while wazero compiles another (F12: a
// SIMD opcode hid a loop from the fuel pass). Reader decodes LEB128 as
// wazero and the spec do (the same lengths, the same over-long and
// overflowing encodings refused), and ScanExpr reads immediates as
// wazero v1.12's validator does. Where two readers can take the same bytes
// for different instructions (a 0xfd sub-opcode of 0x80 or more, one byte to
// wazero and a LEB128 to the spec; a padded 0xfc sub-opcode, a LEB128 to
// both but not to a reader taking one byte) the caller says what it wants
// with a Strictness: AsWazero to see what
// wazero's compiler will see (CheckBudget, Shapes), Refuse to accept only
// what every reader reads alike (internal/fuel, which rewrites what it
// reads). internal/fuel's agreement oracle checks both against wazero on
// mutated guests, binaryen's generated modules and fuzz inputs.
package wasmbin
