/**
 * @module A tiny typed DOM builder: `h('button', { type: 'button' }, 'Retry')`. No framework, no innerHTML.
 */

type Child = Node | string | number | null | undefined | false;
type Attributes = Record<string, string | number | boolean | null | undefined | EventListener>;

/**
 * Creates an HTML element. Attributes named `on<event>` become listeners; `true` sets a boolean attribute,
 * `false`/`null`/`undefined` leave it out.
 *
 * @example
 * h('button', { type: 'button', onclick: () => retry() }, 'Retry')
 */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: Attributes = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  apply(element, attributes);
  element.append(...nodes(children));
  return element;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * Creates an SVG element.
 *
 * @example
 * s('line', { x1: 0, y1: 0, x2: 10, y2: 10, class: 'edge' })
 */
export function s<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Attributes = {},
  ...children: Child[]
): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG_NS, tag);
  apply(element, attributes);
  element.append(...nodes(children));
  return element;
}

function apply(element: Element, attributes: Attributes): void {
  for (const [name, value] of Object.entries(attributes)) {
    if (typeof value === 'function') element.addEventListener(name.slice(2), value);
    else if (value === true) element.setAttribute(name, '');
    else if (value !== false && value !== null && value !== undefined) element.setAttribute(name, String(value));
  }
}

function nodes(children: Child[]): Array<Node | string> {
  const out: Array<Node | string> = [];
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    out.push(typeof child === 'number' ? String(child) : child);
  }
  return out;
}

/**
 * The element with this id, of the expected type; throws if the page does not have it (a build mistake).
 *
 * @example
 * const button = byId('charge', HTMLButtonElement)
 */
export function byId<T extends Element>(id: string, type: abstract new () => T): T {
  const element = document.getElementById(id);
  if (!(element instanceof type)) throw new Error(`#${id} is missing or not a ${type.name}`);
  return element;
}
