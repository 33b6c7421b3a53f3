// Grafana's `Dashboard` type (@grafana/schema, the dashboard JSON model) as the JSON file holds
// it. The type spells some fields as TypeScript string enums (`ThresholdsMode`,
// `FieldColorModeId`, `MappingType`), which no literal in a file can be assigned to, although
// the JSON holds exactly their strings ("absolute"). JsonOf turns each string enum into the union
// of its strings and keeps everything else as it is: required keys, optional keys, unions,
// numeric enums (a number literal is checked against their values) and the check that an object
// literal names no key the type lacks.
import type { Dashboard } from "@grafana/schema";

export type JsonOf<T> = T extends string
  ? string extends T
    ? T
    : `${T}`
  : T extends readonly (infer U)[]
    ? JsonOf<U>[]
    : T extends object
      ? { [K in keyof T]: JsonOf<T[K]> }
      : T;

export type DashboardJson = JsonOf<Dashboard>;
