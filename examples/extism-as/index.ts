// A sandboxd handler written with Extism's AssemblyScript PDK
// (npm @extism/as-pdk 1.0.0, assemblyscript 0.27.37): an unmodified Extism
// plug-in with no WASI, run by sandboxd through its Extism ABI.
//   npm ci && npm run build   -> extism-as.wasm
import { Config, Host } from "@extism/as-pdk";

// myAbort is AssemblyScript's abort hook (asc --use abort=index/myAbort):
// a failed assertion traps the call.
function myAbort(message: string | null, fileName: string | null, lineNumber: u32, columnNumber: u32): void {
  unreachable();
}

// shout upper-cases its input text (a string input schema: the plug-in gets
// the string's bytes) and appends the "suffix" config value, default "!".
// An empty text fails the call (a non-zero return: handler-error).
export function shout(): i32 {
  const text = Host.inputString();
  if (text.length == 0) {
    return 1;
  }
  const suffix = Config.get("suffix");
  // Host.outputString in as-pdk 1.0.0 sets the output's length to the
  // string's UTF-16 length, cutting non-ASCII text short: encode it here.
  Host.output(Uint8Array.wrap(String.UTF8.encode(text.toUpperCase() + (suffix == null ? "!" : suffix as string))));
  return 0;
}
