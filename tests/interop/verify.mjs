// Verifies JWTs with the npm package `jose` (panva/jose), for flask-authflow's interop tests.
//
// Batch mode (no arguments): reads {"cases": [{token, audience, issuer?, algorithms?,
// jwks_url? | jwks?}]} from stdin and prints a JSON array of results.
// Single mode: node verify.mjs <token> <audience> [jwks_url]; without jwks_url the JWK set
// is read from stdin. Prints one JSON result. A result is {"ok": true, "payload", "header"}
// or {"ok": false, "code", "message"}; the exit status is 0 either way (2 on bad usage).
import { createLocalJWKSet, createRemoteJWKSet, jwtVerify } from "jose";

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

async function verifyOne(c) {
  const keys = c.jwks_url
    ? createRemoteJWKSet(new URL(c.jwks_url), { cooldownDuration: 0, cacheMaxAge: 0 })
    : createLocalJWKSet(c.jwks);
  try {
    const { payload, protectedHeader } = await jwtVerify(c.token, keys, {
      audience: c.audience,
      issuer: c.issuer,
      algorithms: c.algorithms ?? ["ES256", "RS256", "RS384", "RS512"],
    });
    return { ok: true, payload, header: protectedHeader };
  } catch (err) {
    return { ok: false, code: err.code ?? err.name, message: String(err.message) };
  }
}

const args = process.argv.slice(2);
if (args.length === 0) {
  const input = JSON.parse(await readStdin());
  const results = [];
  for (const c of input.cases) results.push(await verifyOne(c));
  process.stdout.write(JSON.stringify(results));
} else if (args.length >= 2) {
  const [token, audience, jwksUrl] = args;
  const c = jwksUrl ? { token, audience, jwks_url: jwksUrl } : { token, audience, jwks: JSON.parse(await readStdin()) };
  process.stdout.write(JSON.stringify(await verifyOne(c)));
} else {
  process.stderr.write("usage: node verify.mjs [<token> <audience> [jwks_url]]\n");
  process.exit(2);
}
