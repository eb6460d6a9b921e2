// The official AWS SDK client for Lambda MicroVMs (@aws-sdk/client-lambda-microvms) runs a microVM's
// lifecycle against the loopback fake (spec/fakes/aws/fake.py), so the fake's paths, bodies,
// status codes, errors and SigV4 verification are checked by AWS's own client:
//   RunMicrovm -> GetMicrovm (until RUNNING) -> CreateMicrovmAuthToken -> TagResource -> ListTags
//   -> ListMicrovms (paginated) -> TerminateMicrovm (twice: idempotent) -> GetMicrovm (TERMINATED),
// then the same call with a wrong secret (must fail with 403) and ListManagedMicrovmImages.
//
//   AWS_MICROVM_ENDPOINT_URL=http://127.0.0.1:PORT AWS_MICROVM_IMAGE_ID=arn:... \
//   AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... AWS_REGION=us-east-1 node spec/sdk/aws_microvm.mjs
//
// Prints one JSON object with what it observed; exits non-zero on any failure.
import {
  LambdaMicrovmsClient, RunMicrovmCommand, GetMicrovmCommand, CreateMicrovmAuthTokenCommand,
  TerminateMicrovmCommand, TagResourceCommand, ListTagsCommand, ListManagedMicrovmImagesCommand,
  paginateListMicrovms,
} from '@aws-sdk/client-lambda-microvms';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};

const endpoint = env('AWS_MICROVM_ENDPOINT_URL');
const region = env('AWS_REGION');
const credentials = { accessKeyId: env('AWS_ACCESS_KEY_ID'), secretAccessKey: env('AWS_SECRET_ACCESS_KEY') };
const client = new LambdaMicrovmsClient({ endpoint, region, credentials, maxAttempts: 1 });
const out = { ok: false, steps: [] };
const step = (name, value) => { out.steps.push(name); return value; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function main() {
  const arn = env('AWS_MICROVM_IMAGE_ID');
  const run = step('RunMicrovm', await client.send(new RunMicrovmCommand({
    imageIdentifier: arn, maximumDurationInSeconds: 900,
    idlePolicy: { maxIdleDurationSeconds: 300, suspendedDurationSeconds: 600, autoResumeEnabled: false },
  })));
  out.run = { microvmId: run.microvmId, state: run.state, endpoint: run.endpoint, startedAt: run.startedAt };
  if (!(run.startedAt instanceof Date)) throw new Error('startedAt did not parse as a timestamp');
  let got;
  for (let i = 0; i < 600; i++) { // the fake's PENDING lasts pending_seconds
    got = await client.send(new GetMicrovmCommand({ microvmIdentifier: run.microvmId }));
    if (got.state !== 'PENDING') break;
    await sleep(50);
  }
  step('GetMicrovm');
  out.get = { state: got.state, endpoint: got.endpoint, imageArn: got.imageArn };
  if (got.state !== 'RUNNING') throw new Error(`state ${got.state}, expected RUNNING`);

  const tok = step('CreateMicrovmAuthToken', await client.send(new CreateMicrovmAuthTokenCommand({
    microvmIdentifier: run.microvmId, expirationInMinutes: 60, allowedPorts: [{ port: 8080 }],
  })));
  out.auth_token_keys = Object.keys(tok.authToken);
  const proxyAuth = tok.authToken['X-aws-proxy-auth'];
  if (!proxyAuth) throw new Error('no X-aws-proxy-auth in authToken');
  // the endpoint refuses a request without the proxy token
  const bare = await fetch(got.endpoint + '/health');
  out.endpoint_without_token = bare.status;

  const resource = `arn:aws:lambda:${region}:${arn.split(':')[4]}:microvm:${run.microvmId}`;
  step('TagResource', await client.send(new TagResourceCommand({ Resource: resource, Tags: { 'cseng.run': 'sdk-run' } })));
  const tags = step('ListTags', await client.send(new ListTagsCommand({ Resource: resource })));
  out.tags = tags.Tags;

  const ids = [];
  for await (const page of paginateListMicrovms({ client, pageSize: 1 }, {})) {
    for (const it of page.items) ids.push(it.microvmId);
  }
  step('ListMicrovms');
  out.listed = ids.includes(run.microvmId);

  step('TerminateMicrovm', await client.send(new TerminateMicrovmCommand({ microvmIdentifier: run.microvmId })));
  await client.send(new TerminateMicrovmCommand({ microvmIdentifier: run.microvmId })); // idempotent
  const after = await client.send(new GetMicrovmCommand({ microvmIdentifier: run.microvmId }));
  out.after_terminate = after.state;

  try { // an unknown microVM: ResourceNotFoundException, 404
    await client.send(new GetMicrovmCommand({ microvmIdentifier: 'mvm-does-not-exist' }));
    throw new Error('GetMicrovm of an unknown id succeeded');
  } catch (e) {
    out.not_found = { name: e.name, status: e.$metadata?.httpStatusCode };
  }

  const bad = new LambdaMicrovmsClient({ endpoint, region, maxAttempts: 1,
    credentials: { ...credentials, secretAccessKey: credentials.secretAccessKey + 'x' } });
  try {
    await bad.send(new GetMicrovmCommand({ microvmIdentifier: run.microvmId }));
    throw new Error('a request signed with a wrong secret was accepted');
  } catch (e) {
    out.wrong_secret = { name: e.name, status: e.$metadata?.httpStatusCode };
  }
  const managed = step('ListManagedMicrovmImages', await client.send(new ListManagedMicrovmImagesCommand({})));
  out.managed = managed.items.map((i) => i.imageArn);
  out.ok = out.after_terminate === 'TERMINATED' && out.listed && out.wrong_secret.status === 403 &&
    out.endpoint_without_token === 403 && out.tags['cseng.run'] === 'sdk-run' && out.not_found.status === 404;
}

main().then(() => {
  console.log(JSON.stringify(out));
  process.exit(out.ok ? 0 : 1);
}, (e) => {
  out.error = String(e && e.stack || e);
  out.error_name = e && e.name;
  console.log(JSON.stringify(out));
  process.exit(1);
});
