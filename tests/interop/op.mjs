// A real OpenID provider for the interop tests: panva's oidc-provider (v9) on 127.0.0.1.
//
// Usage: node op.mjs <port>            (or OP_PORT=<port> node op.mjs)
//
// Environment (one client, registered five times: "<id>" signs ID tokens with RS256, "<id>-es256" with ES256,
// "<id>-ps256" with PS256, "<id>-post" authenticates with client_secret_post, "<id>-special" has the secret
// OP_SPECIAL_SECRET, which holds characters that client_secret_basic must form-urlencode; "<id>-tokens" gets
// access tokens that live TOKENS_ACCESS_TTL seconds and refresh tokens rotated at every refresh, for the
// stored-token tests; the revocation endpoint of RFC 7009 is on for every client):
//   OP_CLIENT_ID, OP_CLIENT_SECRET                    client credentials (client_secret_basic)
//   OP_SPECIAL_SECRET                                 the secret of "<id>-special"
//   OP_REDIRECT_URIS, OP_POST_LOGOUT_REDIRECT_URIS    comma-separated lists
//   OP_BACKCHANNEL_LOGOUT_URI                         where the provider POSTs logout tokens (optional)
//   OP_KEEP_SSRF_GUARD=1                              keep oidc-provider's SSRF guard (refuses loopback)
//
// "<id>-fapi" is a FAPI 2.0 client (oidc-provider's fapi profile 2.0): private_key_jwt with an ES256 key made
// here (aud must be the issuer), pushed authorization requests required, DPoP-bound access tokens with a
// server nonce required, ES256 ID tokens. GET /__admin/fapi-client answers its private JWK (test-only).
//
// Mutual TLS (RFC 8705), only when OP_MTLS_PORT is set: an https listener on 127.0.0.1:OP_MTLS_PORT (Node's https,
// requestCert; the handshake does not refuse a missing or unknown certificate, the provider does) serving the same
// provider, advertised as its mtls_endpoint_aliases (token, PAR, userinfo, revocation), and the client "<id>-mtls":
// tls_client_auth with the subject DN OP_MTLS_SUBJECT, certificate-bound access tokens, PAR required, ES256 ID
// tokens, FAPI 2.0 profile; and "<id>-mtls-self": self_signed_tls_client_auth with the self-signed certificate
// OP_MTLS_SELF_SIGNED in its JWKS (x5c), otherwise the same. The test makes the files with `cryptography`:
//   OP_MTLS_PORT, OP_MTLS_CA, OP_MTLS_CERT, OP_MTLS_KEY, OP_MTLS_SUBJECT, OP_MTLS_SELF_SIGNED
//
// Test-only admin route: POST /__admin/rotate?keep_old=1 replaces the RS256, ES256 and PS256 signing keys (the
// old ones stay published after the new ones when keep_old=1) and answers {"kids": [...]}, the new
// published kids, newest first. Grants and sessions survive (the memory adapter is module-wide).
//
// Development only: devInteractions (login with any name and password), cookies over http and a fetch
// that may reach loopback addresses. Never run this outside tests.

import { randomBytes, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';

import { exportJWK, generateKeyPair } from 'jose';
import Provider from 'oidc-provider';

const port = Number(process.argv[2] ?? process.env.OP_PORT);
if (!Number.isInteger(port) || port <= 0 || port > 65535) {
  console.error('usage: node op.mjs <port>');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

const list = (name) => (process.env[name] ?? '').split(',').map((s) => s.trim()).filter(Boolean);
const clientId = process.env.OP_CLIENT_ID ?? 'reference-app';
const clientSecret = process.env.OP_CLIENT_SECRET ?? 'reference-app-secret-0123456789abcdef';
const specialSecret = process.env.OP_SPECIAL_SECRET ?? 'sp+ec%ial&sec=ret 0123456789abcdef';
const redirectUris = list('OP_REDIRECT_URIS');
const postLogoutRedirectUris = list('OP_POST_LOGOUT_REDIRECT_URIS');
const backchannelLogoutUri = process.env.OP_BACKCHANNEL_LOGOUT_URI || undefined;
if (redirectUris.length === 0) {
  console.error('OP_REDIRECT_URIS is required');
  process.exit(2);
}

const keepSsrfGuard = process.env.OP_KEEP_SSRF_GUARD === '1';

function fetchWithoutSsrfGuard(url, options) {
  const { dispatcher: _dropped, ...rest } = options;
  return globalThis.fetch(url, rest);
}

function clientFor(id, alg, { secret = clientSecret, auth = 'client_secret_basic' } = {}) {
  const client = {
    client_id: id,
    client_secret: secret,
    token_endpoint_auth_method: auth,
    redirect_uris: redirectUris,
    post_logout_redirect_uris: postLogoutRedirectUris,
    response_types: ['code'],
    grant_types: ['authorization_code', 'refresh_token'],
    id_token_signed_response_alg: alg,
  };
  if (backchannelLogoutUri) {
    client.backchannel_logout_uri = backchannelLogoutUri;
    client.backchannel_logout_session_required = true;
  }
  return client;
}

async function signingKey(alg, options) {
  const { privateKey } = await generateKeyPair(alg, { extractable: true, ...options });
  const jwk = await exportJWK(privateKey);
  return { ...jwk, alg, use: 'sig', kid: `${alg.toLowerCase()}-${randomBytes(6).toString('hex')}` };
}

async function freshKeys() {
  return [
    await signingKey('RS256', { modulusLength: 2048 }),
    await signingKey('ES256'),
    await signingKey('PS256', { modulusLength: 2048 }),
  ];
}

const cookieKeys = [randomBytes(32).toString('hex')];

// The FAPI 2.0 client's own key (its private JWK is handed to the tests by the admin route).
const fapiId = `${clientId}-fapi`;
const fapiKey = await signingKey('ES256');
const { d: _private, ...fapiPublicKey } = fapiKey;
const isFapiClient = (client) => client?.clientId === fapiId;

function fapiClient() {
  return {
    client_id: fapiId,
    token_endpoint_auth_method: 'private_key_jwt',
    token_endpoint_auth_signing_alg: 'ES256',
    jwks: { keys: [fapiPublicKey] },
    redirect_uris: redirectUris,
    response_types: ['code'],
    grant_types: ['authorization_code', 'refresh_token'],
    id_token_signed_response_alg: 'ES256',
    require_pushed_authorization_requests: true,
    dpop_bound_access_tokens: true,
  };
}

// Mutual TLS: the https listener's port and the client bound to its certificate (only with OP_MTLS_PORT).
const mtlsPort = process.env.OP_MTLS_PORT ? Number(process.env.OP_MTLS_PORT) : undefined;
const mtlsBase = mtlsPort ? `https://127.0.0.1:${mtlsPort}` : undefined;
const mtlsId = `${clientId}-mtls`;
const isMtlsClient = (client) => client?.clientId === mtlsId || client?.clientId === `${mtlsId}-self`;

// The self-signed certificate's public JWK with its x5c: what self_signed_tls_client_auth compares.
function selfSignedJwks() {
  const certificate = new X509Certificate(readFileSync(process.env.OP_MTLS_SELF_SIGNED));
  const jwk = certificate.publicKey.export({ format: 'jwk' });
  return { keys: [{ ...jwk, use: 'sig', x5c: [certificate.raw.toString('base64')] }] };
}

function mtlsClient(selfSigned = false) {
  const auth = selfSigned
    ? { token_endpoint_auth_method: 'self_signed_tls_client_auth', jwks: selfSignedJwks() }
    : { token_endpoint_auth_method: 'tls_client_auth', tls_client_auth_subject_dn: process.env.OP_MTLS_SUBJECT };
  return {
    client_id: selfSigned ? `${mtlsId}-self` : mtlsId,
    ...auth,
    tls_client_certificate_bound_access_tokens: true,
    redirect_uris: redirectUris,
    response_types: ['code'],
    grant_types: ['authorization_code', 'refresh_token'],
    id_token_signed_response_alg: 'ES256',
    require_pushed_authorization_requests: true,
  };
}

// The peer certificate of a request on the https listener (none on the http one, or when none was sent).
function peerCertificate(ctx) {
  const raw = ctx.socket.getPeerCertificate?.()?.raw;
  return raw ? new X509Certificate(raw) : undefined;
}

function mtlsFeature() {
  if (!mtlsBase) return { enabled: false };
  return {
    enabled: true,
    certificateBoundAccessTokens: true,
    tlsClientAuth: true,
    selfSignedTlsClientAuth: true,
    getCertificate: peerCertificate,
    certificateAuthorized: (ctx) => ctx.socket.authorized === true,
    certificateSubjectMatches: (ctx, property, expected) => property === 'tls_client_auth_subject_dn'
      && peerCertificate(ctx)?.subject === expected,
  };
}

function mtlsDiscovery() {
  if (!mtlsBase) return {};
  return {
    mtls_endpoint_aliases: {
      token_endpoint: `${mtlsBase}/token`,
      pushed_authorization_request_endpoint: `${mtlsBase}/request`,
      userinfo_endpoint: `${mtlsBase}/me`,
      revocation_endpoint: `${mtlsBase}/token/revocation`,
    },
  };
}

// The stored-token tests' client: short-lived access tokens, a new refresh token at every refresh.
const TOKENS_ACCESS_TTL = 3;
const isTokensClient = (client) => client?.clientId === `${clientId}-tokens`;
// oidc-provider's own rule for the other clients (rotate past 70 % of the lifetime, or for public clients).
function defaultRotateRefreshToken(ctx) {
  const { RefreshToken: refreshToken, Client: client } = ctx.oidc.entities;
  if (refreshToken.totalLifetime() >= 365.25 * 24 * 60 * 60) return false;
  if (client.clientAuthMethod === 'none' && !refreshToken.isSenderConstrained()) return true;
  return refreshToken.ttlPercentagePassed() >= 70;
}

function build(keys) {
  const provider = new Provider(issuer, {
    clients: [
      clientFor(clientId, 'RS256'),
      clientFor(`${clientId}-es256`, 'ES256'),
      clientFor(`${clientId}-ps256`, 'PS256'),
      clientFor(`${clientId}-post`, 'RS256', { auth: 'client_secret_post' }),
      clientFor(`${clientId}-special`, 'RS256', { secret: specialSecret }),
      clientFor(`${clientId}-tokens`, 'RS256'),
      fapiClient(),
      ...(mtlsBase ? [mtlsClient(), mtlsClient(true)] : []),
    ],
    ttl: {
      AccessToken(_ctx, token, client) {
        return isTokensClient(client) ? TOKENS_ACCESS_TTL : token.resourceServer?.accessTokenTTL || 60 * 60;
      },
    },
    rotateRefreshToken(ctx) {
      return isTokensClient(ctx.oidc.entities.Client) || defaultRotateRefreshToken(ctx);
    },
    enabledJWA: {
      idTokenSigningAlgValues: ['RS256', 'ES256', 'PS256'],
    },
    jwks: { keys },
    cookies: { keys: cookieKeys },
    pkce: { required: () => true },
    scopes: ['openid', 'offline_access', 'email', 'profile'],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    features: {
      devInteractions: { enabled: true },
      backchannelLogout: { enabled: true },
      rpInitiatedLogout: { enabled: true },
      revocation: { enabled: true },
      pushedAuthorizationRequests: { enabled: true },
      dPoP: {
        enabled: true,
        nonceSecret: randomBytes(32),
        requireNonce: (ctx) => isFapiClient(ctx.oidc.client) || ctx.oidc.route === 'userinfo',
      },
      fapi: {
        enabled: true,
        profile: (_ctx, client) => (isFapiClient(client) || isMtlsClient(client) ? '2.0' : undefined),
      },
      mTLS: mtlsFeature(),
    },
    ...(mtlsBase ? {
      discovery: { claim_types_supported: ['normal'], ...mtlsDiscovery() },
      clientAuthMethods: ['client_secret_basic', 'client_secret_jwt', 'client_secret_post', 'private_key_jwt',
        'none', 'tls_client_auth', 'self_signed_tls_client_auth'],
    } : {}),
    // Any login name is an account; its claims derive from the name.
    async findAccount(_ctx, sub) {
      return {
        accountId: sub,
        async claims() {
          return { sub, email: `${sub}@example.com`, email_verified: true, name: sub };
        },
      };
    },
    // The default fetch refuses loopback and private addresses (SSRF guard); the tests' relying party
    // listens on 127.0.0.1, so drop the guard's dispatcher here, for this test provider only
    // (OP_KEEP_SSRF_GUARD=1 keeps it, to show that the guard is what blocks the POST).
    ...(keepSsrfGuard ? {} : { fetch: fetchWithoutSsrfGuard }),
  });
  provider.on('backchannel.error', (_ctx, err, client) => {
    console.error(`backchannel logout to ${client.clientId} failed: ${err.message} (${err.cause?.message ?? ''})`);
  });
  provider.on('backchannel.success', (_ctx, client) => {
    console.error(`backchannel logout to ${client.clientId} sent`);
  });
  provider.on('server_error', (_ctx, err) => {
    console.error(`server_error: ${err.stack}`);
  });
  return provider;
}

let keys = await freshKeys();
let current = build(keys);

async function serve(req, res) {
  const url = new URL(req.url, issuer);
  if (url.pathname === '/__admin/fapi-client') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ client_id: fapiId, jwk: fapiKey }));
    return;
  }
  if (url.pathname === '/__admin/rotate') {
    if (req.method !== 'POST') {
      res.writeHead(405).end();
      return;
    }
    const fresh = await freshKeys();
    keys = url.searchParams.get('keep_old') === '1' ? [...fresh, ...keys] : fresh;
    current = build(keys);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kids: keys.map((k) => k.kid), signing: fresh.map((k) => k.kid) }));
    return;
  }
  current.callback()(req, res);
}

const server = http.createServer(serve);
server.listen(port, '127.0.0.1', () => {
  console.log(`oidc-provider listening on ${issuer}`);
});

const mtlsServer = mtlsBase
  ? https.createServer({
    key: readFileSync(process.env.OP_MTLS_KEY),
    cert: readFileSync(process.env.OP_MTLS_CERT),
    ca: readFileSync(process.env.OP_MTLS_CA),
    requestCert: true,
    rejectUnauthorized: false,
  }, serve)
  : undefined;
mtlsServer?.listen(mtlsPort, '127.0.0.1', () => {
  console.log(`oidc-provider's mTLS endpoints on ${mtlsBase}`);
});

const stop = () => {
  mtlsServer?.close();
  server.close(() => process.exit(0));
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
