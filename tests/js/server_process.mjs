// Shared by the server e2e tests: waits for a spawned `pagoda serve` (or
// mpirun running it) to log its listening address.

// Resolves to {proc, url, stderr()} once the server listens; rejects if it
// exits first or does not listen within timeoutMs.
export function waitForServer(proc, timeoutMs) {
  return new Promise((resolve, reject) => {
    let err = "";
    const timer = setTimeout(() => reject(new Error("server did not start: " + err)), timeoutMs);
    proc.stderr.on("data", (d) => {
      err += d.toString();
      const m = err.match(/on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && !proc.url) {
        clearTimeout(timer);
        proc.url = `http://127.0.0.1:${m[1]}`;
        resolve({ proc, url: proc.url, stderr: () => err });
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited ${code}: ${err}`));
    });
  });
}
