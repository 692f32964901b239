// A Standard Webhooks receiver built on the stock npm package
// `standardwebhooks`, nothing of Herald's: e2e/node_test.go starts it, points
// an app's endpoint at it and reads its verdicts.
//
// Usage: node receiver.js SECRETS_FILE
// SECRETS_FILE holds a JSON array of whsec_ secrets, re-read on every
// request; a delivery passes when EVERY listed secret verifies it (so during
// a rotation both the old and the new one must) and its webhook-id is
// "<source app>:<event id>" of the body. The receiver prints
// "listening PORT" once, then one line per delivery: "ok ID" or
// "fail ID REASON", and answers 204 or 401.
"use strict";
const fs = require("fs");
const http = require("http");
const { Webhook } = require("standardwebhooks");

const secretsFile = process.argv[2];
if (!secretsFile) {
  console.error("usage: node receiver.js SECRETS_FILE");
  process.exit(2);
}

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const id = req.headers["webhook-id"] || "-";
    let reason = "";
    try {
      const secrets = JSON.parse(fs.readFileSync(secretsFile, "utf8"));
      if (!Array.isArray(secrets) || secrets.length === 0) {
        reason = "no secrets configured";
      }
      for (const s of secrets) {
        // The library reads the three webhook-* headers itself.
        new Webhook(s).verify(body, req.headers);
      }
      // webhook-id is "<source app>:<event id>": unique across apps, so
      // deduplicating on it never drops another app's event.
      const ev = JSON.parse(body);
      const want = `${String(ev.source).replace(/^app:/, "")}:${ev.id}`;
      if (reason === "" && id !== want) {
        reason = `webhook-id ${id} is not ${want}`;
      }
    } catch (e) {
      reason = String(e && e.message ? e.message : e).replace(/\s+/g, " ");
    }
    if (reason === "") {
      console.log(`ok ${id}`);
      res.writeHead(204);
    } else {
      console.log(`fail ${id} ${reason}`);
      res.writeHead(401);
    }
    res.end();
  });
});

server.listen(0, "127.0.0.1", () => {
  console.log(`listening ${server.address().port}`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
