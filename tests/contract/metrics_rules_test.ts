/**
 * The alert rules docs/operators.md gives under "Metrics (Prometheus)", as
 * an operator would copy them: Prometheus's `promtool check rules` accepts
 * them, and `promtool test rules` shows each firing when it should (no
 * server scraped, a server without its lease, a burst of lock-outs) and
 * not before (skipped with a message without promtool, failed under CI);
 * and its table of metrics names exactly what `/metrics` serves.
 */

import assert from "node:assert/strict";
import {
  ignoreWithoutPromtool,
  promtoolInstalled,
  runPromtool,
} from "../support/promtool.ts";
import { OUTCOME_OF } from "../../lib/http/telemetry.ts";
import { Figures } from "../../lib/server/figures.ts";
import { exposition } from "../../lib/server/metrics.ts";

const ignore = await ignoreWithoutPromtool("metrics_rules_test.ts");

/** The section "Metrics (Prometheus)" of docs/operators.md. */
function metricsSection(): string {
  const doc = Deno.readTextFileSync(
    new URL("../../docs/operators.md", import.meta.url),
  );
  const start = doc.indexOf("\n## Metrics (Prometheus)\n");
  assert.notEqual(start, -1, "docs/operators.md has no metrics section");
  return doc.slice(start, doc.indexOf("\n## ", start + 1));
}

/** The section's YAML block that starts with `groups:`. */
function documentedRules(): string {
  const section = metricsSection();
  const blocks = [...section.matchAll(/```yaml\n([\s\S]*?)```/g)]
    .map((m) => m[1]);
  const rules = blocks.find((block) => block.startsWith("groups:"));
  assert.ok(rules, "the metrics section shows no alert rules");
  return rules;
}

/** An alert's summary as documented, with `{{ $value }}` filled in. */
function summary(rules: string, alert: string, value?: number): string {
  const from = rules.indexOf(`alert: ${alert}`);
  const line = rules.slice(from).match(/summary: "?(.*?)"?\n/);
  assert.ok(line, `${alert} has no summary`);
  return line[1].replace("{{ $value }}", String(value));
}

Deno.test({
  name:
    "promtool accepts the documented alert rules, and they fire when no server is scraped, when none holds its lease, and at a burst of lock-outs, and not before",
  ignore,
  async fn() {
    assert.ok(await promtoolInstalled(), "apt-get install -y prometheus");
    const rules = documentedRules();
    const dir = await Deno.makeTempDir();
    try {
      await Deno.writeTextFile(`${dir}/rules.yml`, rules);
      const checked = await runPromtool(["check", "rules", `${dir}/rules.yml`]);
      assert.equal(checked.code, 0, checked.output);
      assert.match(checked.output, /SUCCESS: 2 rules found/);
      const noServer = summary(rules, "IntegrationNoLiveServer");
      const burst = summary(rules, "IntegrationLockoutBurst", 80);
      const server = 'job="integration",instance="10.0.0.11:9464"';
      // promtool's unit test format; JSON is YAML.
      const tests = {
        rule_files: ["rules.yml"],
        evaluation_interval: "1m",
        tests: [
          {
            interval: "1m",
            input_series: [
              { series: `up{${server}}`, values: "1x9" },
              {
                series: `integration_lease_held{${server}}`,
                values: "1 1 0 0 0 0 0 0 0 0",
              },
              {
                series: `integration_lockouts_total{${server},scope="address"}`,
                values: "0 0 0 0 0 0 0 40 80 80",
              },
            ],
            alert_rule_test: [
              { eval_time: "1m", alertname: "IntegrationNoLiveServer" },
              {
                eval_time: "4m",
                alertname: "IntegrationNoLiveServer",
                exp_alerts: [{
                  exp_labels: { severity: "page" },
                  exp_annotations: { summary: noServer },
                }],
              },
              { eval_time: "5m", alertname: "IntegrationLockoutBurst" },
              {
                eval_time: "9m",
                alertname: "IntegrationLockoutBurst",
                exp_alerts: [{
                  exp_labels: { severity: "warning" },
                  exp_annotations: { summary: burst },
                }],
              },
            ],
          },
          {
            interval: "1m",
            // Nothing of the job is scraped at all.
            input_series: [{ series: 'up{job="other"}', values: "1x5" }],
            alert_rule_test: [{
              eval_time: "3m",
              alertname: "IntegrationNoLiveServer",
              exp_alerts: [{
                exp_labels: { severity: "page" },
                exp_annotations: { summary: noServer },
              }],
            }],
          },
        ],
      };
      await Deno.writeTextFile(`${dir}/tests.yml`, JSON.stringify(tests));
      const tested = await runPromtool(["test", "rules", `${dir}/tests.yml`]);
      assert.equal(tested.code, 0, tested.output);
      assert.match(tested.output, /SUCCESS/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("docs/operators.md's metrics table names every family /metrics serves, and every outcome", () => {
  const table = metricsSection().split("\n").filter((l) => l.startsWith("| `"));
  const figures = new Figures({
    routes: [],
    lease: { held: true, subscribe: () => {} },
  });
  figures.storeCall("get", 0.001);
  figures.outcome("valid", 1);
  const served = new Set(
    [...exposition(figures.read()).matchAll(/^# TYPE (\w+) /gm)].map((m) =>
      m[1]
    ),
  );
  const documented = new Set(
    table.map((line) => line.match(/^\| `(\w+)`/)![1]),
  );
  assert.deepEqual([...documented].sort(), [...served].sort());
  const outcomes = table.find((line) =>
    line.startsWith("| `integration_auth_outcomes_total`")
  )!.split("|")[3].replace("`outcome`:", "");
  assert.deepEqual(
    [...outcomes.matchAll(/`(\w+)`/g)].map((m) => m[1]).sort(),
    Object.keys(OUTCOME_OF).sort(),
  );
});
