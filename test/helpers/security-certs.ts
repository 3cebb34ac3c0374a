/**
 * A throwaway PKI for the TLS tests, made with the `openssl` command at test time:
 * a CA, a server certificate for 127.0.0.1 (IP SAN) and a client certificate for
 * mutual TLS, all short-lived, in a temporary directory.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The files of a test PKI. */
export interface TestPki {
  dir: string;
  caFile: string;
  serverCert: string;
  serverKey: string;
  clientCert: string;
  clientKey: string;
  /** A second CA that signed nothing here: trusting it must fail the handshake. */
  otherCaFile: string;
  /** Deletes the directory. */
  remove(): Promise<void>;
}

/** Fails clearly when `openssl` is missing. */
export async function requireOpenssl(): Promise<string> {
  try {
    const { stdout } = await run("openssl", ["version"]);
    return stdout.trim();
  } catch (err) {
    throw new Error(`the TLS tests need the openssl command on PATH: ${err instanceof Error ? err.message : String(err)}`);
  }
}

async function openssl(args: string[], cwd: string): Promise<void> {
  try {
    await run("openssl", args, { cwd });
  } catch (err) {
    const e = err as { stderr?: string; message?: string };
    throw new Error(`openssl ${args.join(" ")} failed: ${e.stderr ?? e.message ?? String(err)}`);
  }
}

const EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

async function makeCa(dir: string, name: string): Promise<void> {
  await openssl(
    ["req", "-x509", ...EC_KEY, "-keyout", `${name}.key`, "-out", `${name}.pem`, "-days", "2", "-subj", `/CN=pcg test ${name}`,
      "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
    dir,
  );
}

async function makeLeaf(dir: string, name: string, cn: string, extensions: string): Promise<void> {
  await writeFile(join(dir, `${name}.ext`), extensions);
  await openssl(["req", ...EC_KEY, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${cn}`], dir);
  await openssl(
    ["x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", `${name}.pem`, "-days", "2", "-extfile", `${name}.ext`],
    dir,
  );
}

/** Generates the PKI into a new temporary directory. */
export async function createTestPki(): Promise<TestPki> {
  await requireOpenssl();
  const dir = await mkdtemp(join(tmpdir(), "pcg-pki-"));
  try {
    await makeCa(dir, "ca");
    await makeCa(dir, "other-ca");
    await makeLeaf(dir, "server", "127.0.0.1", "subjectAltName=IP:127.0.0.1\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n");
    await makeLeaf(dir, "client", "pcg-client", "keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n");
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    dir,
    caFile: join(dir, "ca.pem"),
    serverCert: join(dir, "server.pem"),
    serverKey: join(dir, "server.key"),
    clientCert: join(dir, "client.pem"),
    clientKey: join(dir, "client.key"),
    otherCaFile: join(dir, "other-ca.pem"),
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

/** The server's `tls { }` block; `verify` asks for (and checks) client certificates. */
export function serverTlsConfig(pki: TestPki, verify = false): string {
  const q = JSON.stringify;
  return `tls { cert_file: ${q(pki.serverCert)}, key_file: ${q(pki.serverKey)}, ca_file: ${q(pki.caFile)}, timeout: 5${verify ? ", verify: true" : ""} }`;
}
