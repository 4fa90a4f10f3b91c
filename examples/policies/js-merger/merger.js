// vigil's config merger, in JavaScript: the default merger, again.
//
// Applies each layer over the previous ones as a JSON merge patch (RFC 7386:
// objects merge key by key, null deletes, anything else replaces), then checks
// the merged result against vigil's configuration, rejecting every unknown or
// mistyped field with its JSON path and the last layer that set it.
//
// JavaScript has one number type: a number is an integer here when its source
// text is one (`5`, not `5.0`), read through JSON.parse's source-text access.

import { log } from 'vigil:policy/log@0.1.0';

const POSITIVE_INT = 'positive-int';
const NON_NEGATIVE_INT = 'non-negative-int';
const BOOL = 'bool';
const TEXT = 'text';
const ANYTHING = 'anything';

const POLICY = {
  fields: {
    enabled: BOOL,
    dryRun: BOOL,
    deadlineMs: POSITIVE_INT,
    memoryLimitMiB: POSITIVE_INT,
    trialSeconds: NON_NEGATIVE_INT,
    config: ANYTHING,
  },
};

const VIGIL_CONFIG = {
  fields: {
    evictionPeriodSeconds: POSITIVE_INT,
    evictionBurst: POSITIVE_INT,
    conditionTransitionSeconds: NON_NEGATIVE_INT,
    dryRun: BOOL,
    pdbOverrideAfterSeconds: NON_NEGATIVE_INT,
    sorter: TEXT,
    policies: { mapOf: POLICY },
  },
};

// Numbers are kept as { integer, value } so `5.0` is not taken for an integer.
class Num {
  constructor(value, source) {
    this.value = value;
    this.integer = /^-?\d+$/.test(source ?? String(value));
  }
  toJSON() {
    return this.value;
  }
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && !(v instanceof Num);

// Sets a key even if it is `__proto__`.
function put(object, key, value) {
  Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
}

function parse(text) {
  return JSON.parse(text, (key, value, context) =>
    typeof value === 'number' ? new Num(value, context?.source) : value,
  );
}

function mergePatch(target, patch) {
  if (!isObject(patch)) return patch;
  const merged = isObject(target) ? target : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete merged[key];
    else put(merged, key, mergePatch(Object.hasOwn(merged, key) ? merged[key] : undefined, value));
  }
  return merged;
}

function check(value, shape, path, problems) {
  const problem = (reason) => problems.push({ path: [...path], reason });
  const isInt = value instanceof Num && value.integer && value.value >= 0;
  if (shape === POSITIVE_INT) {
    if (!isInt || value.value === 0) problem('must be a positive integer');
  } else if (shape === NON_NEGATIVE_INT) {
    if (!isInt) problem('must be a non-negative integer');
  } else if (shape === BOOL) {
    if (typeof value !== 'boolean') problem('must be true or false');
  } else if (shape === TEXT) {
    if (typeof value !== 'string') problem('must be a string');
  } else if (shape !== ANYTHING) {
    if (!isObject(value)) return problem('must be an object');
    // Keys in code point order, as the Rust merger reports them.
    for (const key of Object.keys(value).sort(byCodePoint)) {
      path.push(key);
      if (shape.mapOf) check(value[key], shape.mapOf, path, problems);
      else if (Object.hasOwn(shape.fields, key)) check(value[key], shape.fields[key], path, problems);
      else problems.push({ path: [...path], reason: 'unknown field' });
      path.pop();
    }
  }
}

function byCodePoint(a, b) {
  const x = Array.from(a, (c) => c.codePointAt(0));
  const y = Array.from(b, (c) => c.codePointAt(0));
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] !== y[i]) return x[i] - y[i];
  }
  return x.length - y.length;
}

const sets = (value, path) =>
  path.every((key) => {
    if (!isObject(value) || !Object.hasOwn(value, key)) return false;
    value = value[key];
    return true;
  });

export const merger = {
  merge(layers) {
    let merged = {};
    const parsed = [];
    const rejections = [];
    for (const layer of layers) {
      let value;
      try {
        value = parse(layer.json);
      } catch (e) {
        rejections.push({ source: layer.source, field: '$', reason: `layer is not JSON: ${e.message}` });
        continue;
      }
      if (!isObject(value)) {
        rejections.push({ source: layer.source, field: '$', reason: 'layer must be a JSON object' });
        continue;
      }
      merged = mergePatch(merged, value);
      parsed.push({ source: layer.source, value });
    }
    const problems = [];
    check(merged, VIGIL_CONFIG, [], problems);
    for (const { path, reason } of problems) {
      const setter = parsed.findLast(({ value }) => sets(value, path));
      rejections.push({ source: setter ? setter.source : '', field: ['$', ...path].join('.'), reason });
    }
    if (rejections.length > 0) {
      log('warn', `${rejections.length} problem(s) in ${layers.length} config layer(s)`);
      throw rejections;
    }
    return JSON.stringify(merged);
  },
};
