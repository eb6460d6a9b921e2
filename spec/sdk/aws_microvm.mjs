// The official AWS SDK client for Lambda MicroVMs (@aws-sdk/client-lambda-microvms) runs a microVM's
// lifecycle against the loopback fake (spec/providers/aws_microvm/fake.py), so the fake's paths, bodies,
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
  paginateListMicrovms, CreateMicrovmImageCommand, GetMicrovmImageCommand,
} from '@aws-sdk/client-lambda-microvms';
// S3's official client, as @daytonaio/sdk pins it (spec/sdk/package-lock.json)
import { S3Client, PutObjectCommand } from '@aws-sdk/client-s3';
import { readFileSync } from 'node:fs';

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
    imageIdentifier: arn, maximumDurationInSeconds: 900, runHookPayload: JSON.stringify({ token: 'sdk-agent-token' }),
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

  // the image build prewarm does: the code artifact to S3 (path style), CreateMicrovmImage, poll
  if (process.env.AWS_MICROVM_ARTIFACT) {
    const bucket = env('AWS_MICROVM_TEST_BUCKET');
    const s3 = new S3Client({ endpoint: env('AWS_ENDPOINT_URL_S3'), region, credentials, forcePathStyle: true,
      maxAttempts: 1, requestChecksumCalculation: 'WHEN_REQUIRED' });
    const key = 'sdk/microvm-agent.zip';
    step('S3PutObject', await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key,
      Body: readFileSync(process.env.AWS_MICROVM_ARTIFACT), ContentType: 'application/zip' })));
    const img = step('CreateMicrovmImage', await client.send(new CreateMicrovmImageCommand({
      name: 'sdk-image', baseImageArn: out.managed[0], buildRoleArn: env('AWS_MICROVM_BUILD_ROLE_ARN'),
      codeArtifact: { uri: `s3://${bucket}/${key}` }, cpuConfigurations: [{ architecture: 'ARM_64' }],
      hooks: { port: 8080, microvmHooks: { run: 'ENABLED', terminate: 'ENABLED' }, microvmImageHooks: { ready: 'ENABLED' } },
      tags: { 'cseng.image': 'microvm-agent' },
    })));
    let st = img.state;
    for (let i = 0; i < 1200 && st === 'CREATING'; i++) {
      await sleep(50);
      st = (await client.send(new GetMicrovmImageCommand({ imageIdentifier: img.imageArn }))).state;
    }
    step('GetMicrovmImage');
    out.image = { arn: img.imageArn, first: img.state, state: st };
    if (st !== 'CREATED') throw new Error(`image ${img.imageArn} is ${st}`);
  }
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
