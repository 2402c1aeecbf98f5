// A real OpenID Connect provider (npm oidc-provider 9) for JobDeck's sign-in tests. Test use only.
//
//   node server.mjs [PORT]        (or IDP_PORT; 0 or nothing: any free port)
//   prints one line "ready <issuer>" on stdout once it answers.
//
// Environment:
//   IDP_WEB_REDIRECT_URIS  comma list of jobdeck-web's redirect URIs (default http://127.0.0.1:8640/auth/callback)
//   IDP_API_AUDIENCE       the `aud` of access tokens (default jobdeck-api)
//   IDP_ACCESS_TOKEN_TTL   access token lifetime in seconds (default 300)
//
// Users (pick one with the authorization request's login_hint, or the login form):
//   alice: roles [admin], teams [ops]; olive: roles [operator], teams [payments]; vic: roles [viewer], teams [payments];
//   nora: no roles, no teams (signed in, allowed nothing)
// Clients: see CLIENTS below. Test-only endpoints under /test/ (see the handlers at the bottom).
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';

import Provider, { errors } from 'oidc-provider';

const HOST = '127.0.0.1';
const PORT = Number(process.argv[2] ?? process.env.IDP_PORT ?? 0);
const AUDIENCE = process.env.IDP_API_AUDIENCE || 'jobdeck-api';
const ACCESS_TOKEN_TTL = Number(process.env.IDP_ACCESS_TOKEN_TTL || 300);
// The resource indicator (an absolute URI, RFC 8707) every access token is for, by default.
const API_RESOURCE = 'urn:jobdeck:api';
const WEB_REDIRECTS = (process.env.IDP_WEB_REDIRECT_URIS || 'http://127.0.0.1:8640/auth/callback')
  .split(',').map((s) => s.trim()).filter(Boolean);

const USERS = {
  alice: { name: 'Alice Admin', roles: ['admin'], teams: ['ops'] },
  olive: { name: 'Olive Operator', roles: ['operator'], teams: ['payments'] },
  vic: { name: 'Vic Viewer', roles: ['viewer'], teams: ['payments'] },
  nora: { name: 'Nora Nobody', roles: [], teams: [] },
};

// Claims of client-credentials tokens, by client id.
const SERVICES = {
  'svc-operator': { roles: ['operator'], teams: ['payments'] },
  'svc-agent': { roles: ['agent'], teams: [] },
};

const CLIENTS = [
  {
    client_id: 'jobdeck-web',
    client_secret: 'jobdeck-web-secret',
    grant_types: ['authorization_code', 'refresh_token'],
    response_types: ['code'],
    redirect_uris: WEB_REDIRECTS,
    post_logout_redirect_uris: WEB_REDIRECTS,
  },
  {
    // A native app: a redirect to http://127.0.0.1/callback matches on any port (RFC 8252 §7.3).
    client_id: 'jobdeck-cli',
    application_type: 'native',
    token_endpoint_auth_method: 'none',
    grant_types: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'],
    response_types: ['code'],
    redirect_uris: ['http://127.0.0.1/callback'],
  },
  ...Object.keys(SERVICES).map((id) => ({
    client_id: id,
    client_secret: `${id}-secret`,
    grant_types: ['client_credentials'],
    response_types: [],
    redirect_uris: [],
  })),
];

function newRsaKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: `rsa-${randomBytes(6).toString('hex')}`, alg: 'RS256', use: 'sig' };
}

// Signing keys, newest first: the provider signs with the first one; rotated-out keys stay published.
const rsaKeys = [newRsaKey()];
// A P-256 key the IdP publishes but never signs with; GET /test/forgery-key hands its private half
// to tests, which sign the tokens the IdP will not mint (expired, wrong issuer, ...).
const forgeryKey = {
  ...generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' }),
  kid: 'test-forgery-es256', alg: 'ES256', use: 'sig',
};
const cookieKeys = [randomBytes(32).toString('hex')];

function claimsFor(accountId) {
  const user = USERS[accountId];
  return user && { roles: user.roles, teams: user.teams };
}

function makeProvider(issuer) {
  const provider = new Provider(issuer, {
    clients: CLIENTS,
    jwks: { keys: [...rsaKeys, forgeryKey] },
    cookies: { keys: cookieKeys },
    claims: {
      openid: ['sub', 'roles', 'teams'],
      profile: ['name', 'preferred_username'],
      email: ['email', 'email_verified'],
    },
    // Scope claims go in the ID token too (not only at userinfo), so the web UI has roles at once.
    conformIdTokenClaims: false,
    pkce: { required: () => true },
    scopes: ['openid', 'offline_access', 'profile', 'email', 'api'],
    async findAccount(ctx, sub) {
      const user = USERS[sub];
      if (!user) return undefined;
      return {
        accountId: sub,
        async claims() {
          return {
            sub, name: user.name, preferred_username: sub, email: `${sub}@example.test`, email_verified: true,
            roles: user.roles, teams: user.teams,
          };
        },
      };
    },
    async extraTokenClaims(ctx, token) {
      if (token.kind === 'ClientCredentials') return SERVICES[token.clientId];
      return token.accountId ? claimsFor(token.accountId) : undefined;
    },
    // Refresh tokens for clients allowed the grant, without requiring offline_access.
    async issueRefreshToken(ctx, client) {
      return client.grantTypeAllowed('refresh_token');
    },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      deviceFlow: {
        enabled: true,
        // Plain pages (the defaults pull a web font); tests/auth/oidc_idp.py walks them with httpx.
        async userCodeInputSource(ctx, form, out, err) {
          const problem = err ? `<p class="error">${err.userCode ? 'unknown code' : escape(err.message || err.name)}</p>` : '';
          ctx.body = page(`<h1>Device sign-in</h1>${problem}${form}<button type="submit" form="op.deviceInputForm">Continue</button>`);
        },
        async userCodeConfirmSource(ctx, form, client, deviceInfo, userCode) {
          ctx.body = page(`<h1>Confirm device</h1><p>${client.clientId} shows <code>${userCode}</code></p>${form}
            <button type="submit" form="op.deviceConfirmForm">Continue</button>`);
        },
        async successSource(ctx) {
          ctx.body = page('<h1>Sign-in Success</h1><p>You can close this page.</p>');
        },
      },
      revocation: { enabled: true },
      rpInitiatedLogout: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: async (ctx, client, oneOf) => oneOf ?? API_RESOURCE,
        useGrantedResource: async () => true,
        getResourceServerInfo: async (ctx, resource) => {
          if (resource !== API_RESOURCE) throw new errors.InvalidTarget();
          return {
            scope: 'api',
            audience: AUDIENCE,
            accessTokenTTL: ACCESS_TOKEN_TTL,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256', kid: rsaKeys[0].kid } },
          };
        },
      },
    },
    ttl: {
      AccessToken: ACCESS_TOKEN_TTL, AuthorizationCode: 60, ClientCredentials: ACCESS_TOKEN_TTL, DeviceCode: 300, IdToken: 300,
      Grant: 3600, Interaction: 300, RefreshToken: 3600, Session: 3600,
    },
  });
  return provider;
}

// --- the non-interactive sign-in: login_hint (or the one-field form) picks the user; consent is automatic

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(body) {
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>JobDeck test IdP</title></head><body>${body}</body></html>`;
}

function html(res, status, body) {
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8' });
  res.end(page(body));
}

function json(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function formBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString();
  if ((req.headers['content-type'] || '').includes('application/json')) return text ? JSON.parse(text) : {};
  return Object.fromEntries(new URLSearchParams(text));
}

async function interaction(provider, req, res, url) {
  const details = await provider.interactionDetails(req, res);
  const { uid, prompt, params, session } = details;
  if (prompt.name === 'login') {
    const chosen = req.method === 'POST' ? (await formBody(req)).user : params.login_hint;
    if (!USERS[chosen]) {
      const known = Object.keys(USERS).join(', ');
      return html(res, 200, `<h1>Sign in</h1><form method="post" action="/interaction/${uid}">
        <label>User (${known}) <input name="user" autofocus></label><button type="submit">Sign in</button></form>`);
    }
    return provider.interactionFinished(req, res, { login: { accountId: chosen } }, { mergeWithLastSubmission: false });
  }
  if (prompt.name === 'consent') {
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    const missing = prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
      grant.addResourceScope(indicator, scopes.join(' '));
    }
    const grantId = await grant.save();
    return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  }
  return html(res, 400, `unexpected prompt ${prompt.name} at ${url.pathname}`);
}

// --- the HTTP server: /interaction/* and /test/* here, everything else is oidc-provider's

let provider;
let handler;
let issuer;

function serve(newProvider) {
  provider = newProvider;
  handler = provider.callback();
}

const server = createServer(async (req, res) => {
  const url = new URL(req.url, issuer);
  try {
    if (url.pathname.startsWith('/interaction/')) return await interaction(provider, req, res, url);
    if (url.pathname === '/test/forgery-key' && req.method === 'GET') return json(res, 200, forgeryKey);
    if (url.pathname === '/test/rotate' && req.method === 'POST') {
      // A new RS256 key becomes the signing key; the old ones stay published (as after a real rotation,
      // tokens already issued keep verifying). A new Provider over the same in-memory storage and
      // cookie keys serves from now on, so sessions, grants and tokens survive.
      rsaKeys.unshift(newRsaKey());
      serve(makeProvider(issuer));
      return json(res, 200, { kid: rsaKeys[0].kid, published: rsaKeys.map((k) => k.kid) });
    }
    return handler(req, res);
  } catch (err) {
    return json(res, 500, { error: 'server_error', error_description: String(err?.message ?? err) });
  }
});

server.listen(PORT, HOST, () => {
  issuer = `http://${HOST}:${server.address().port}`;
  serve(makeProvider(issuer));
  process.stdout.write(`ready ${issuer}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => {
  server.close(() => process.exit(0));
  server.closeAllConnections();
});
