// Validates an OpenAPI document against the OpenAPI schema of its version
// and resolves every $ref: node validate.mjs FILE. Exits 1 with the
// validator's complaint.
import SwaggerParser from "@apidevtools/swagger-parser";

const file = process.argv[2];
if (!file) {
  console.error("usage: node validate.mjs FILE");
  process.exit(2);
}
try {
  const api = await SwaggerParser.validate(file);
  console.log(`valid: OpenAPI ${api.openapi}, ${Object.keys(api.paths).length} paths`);
} catch (err) {
  console.error(err.message);
  process.exit(1);
}
